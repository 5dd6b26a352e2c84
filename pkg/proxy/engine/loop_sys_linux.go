//go:build linux

package engine

import (
	"bytes"
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fill reads once into the free part of *buf. It reports whether bytes arrived; eof is set at the
// end of the stream or on an error (err, nil at the end). A short read means the socket is empty:
// readable is cleared, and the next arrival is reported again.
func fill(fd int, buf *[]byte, readable, hup *bool) (got, eof bool, err error) {
	b := *buf
	n, eof, err := readInto(fd, b[len(b):cap(b)], readable, hup)
	*buf = b[:len(b)+n]
	return n > 0, eof, err
}

// readInto reads once into p (not empty), with fill's rules: n bytes arrived; eof at the end of the
// stream or on an error; a short read clears readable.
func readInto(fd int, p []byte, readable, hup *bool) (n int, eof bool, err error) {
	return readvInto(fd, p, nil, readable, hup)
}

// readvInto is readInto into p and then q (one readv when q is not empty).
func readvInto(fd int, p, q []byte, readable, hup *bool) (n int, eof bool, err error) {
	for {
		var n int
		var err error
		if len(q) == 0 {
			n, err = sysRead(fd, p)
		} else {
			n, err = sysReadv2(fd, p, q)
		}
		switch {
		case n > 0:
			if n < len(p)+len(q) {
				*readable = false
			}
			return n, false, nil
		case n == 0 && err == nil:
			*readable = false
			return 0, true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			// Nothing to read, not even the end: whatever reported a hang-up, the stream has not
			// ended (waiting for an arrival is right, reading again is not).
			*readable, *hup = false, false
			return 0, false, nil
		default:
			*readable = false
			return 0, true, err
		}
	}
}

// flushOut writes out to fd while the socket takes it; a full socket clears writable (the next
// writable edge is reported). It returns the error of a failed write.
func flushOut(fd int, out *bytes.Buffer, writable *bool) error {
	for out.Len() > 0 && *writable {
		n, err := sysWrite(fd, out.Bytes())
		if n > 0 {
			out.Next(n)
		}
		switch {
		case err == nil, errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			*writable = false
		default:
			return err
		}
	}
	return nil
}

// flushOutv writes out, then a and b, in one system call while the socket takes them (writev); what
// it does not take is copied to out, which flushOut writes on.
func flushOutv(fd int, out *bytes.Buffer, writable *bool, a, b []byte) error {
	// A few bytes cost less to copy than the vector (a tiny answer's body after its head).
	if *writable && len(a)+len(b) > evCopyMax {
		var iov [3]unix.Iovec
		n := 0
		for _, p := range [3][]byte{out.Bytes(), a, b} {
			if len(p) > 0 {
				iov[n].Base = &p[0]
				iov[n].SetLen(len(p))
				n++
			}
		}
		var wrote int
		var err error
		for {
			wrote, err = sysWritev(fd, iov[:n])
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, unix.EAGAIN):
			*writable = false
		default:
			return err
		}
		skip := min(wrote, out.Len())
		out.Next(skip)
		wrote -= skip
		skip = min(wrote, len(a))
		a = a[skip:]
		wrote -= skip
		b = b[wrote:]
	}
	_, _ = out.Write(a)
	_, _ = out.Write(b)
	return flushOut(fd, out, writable)
}

// The loops' socket calls on non-blocking sockets never wait, so they are made as raw system calls:
// a P that enters the runtime's syscall state is, after 20µs, handed off by sysmon to another
// thread, and on a loop making a few hundred thousand calls a second that hand-off, the thread
// wake-ups it causes and sysmon's own polling cost more than the calls. Only the epoll wait that
// blocks goes through the runtime (see run).

func sysRead(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// sysReadv2 reads into p, then q (neither empty).
func sysReadv2(fd int, p, q []byte) (int, error) {
	var iov [2]unix.Iovec
	iov[0].Base, iov[1].Base = &p[0], &q[0]
	iov[0].SetLen(len(p))
	iov[1].SetLen(len(q))
	n, _, e := unix.RawSyscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), 2)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func sysWrite(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func sysWritev(fd int, iov []unix.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// sysPeek is peekFD as a raw system call.
func sysPeek(fd int) peekState {
	var b [1]byte
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return peekQuiet
		case e == 0 && n > 0:
			return peekData
		}
		return peekClosed // the end of the stream, or an error
	}
}

// epollNow returns the events ready now, without waiting.
func epollNow(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// The epoll event bits the loops look at.
const (
	unixIn     = unix.EPOLLIN
	unixOut    = unix.EPOLLOUT
	unixHangUp = unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR
)
