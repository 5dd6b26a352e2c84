package h1

import (
	"bytes"
	"errors"
	"io"
)

// chunked decodes a chunked body fed to it in pieces, with net/http's rules (its internal
// chunkedReader, which httputil.NewChunkedReader is): chunk-size lines end in CRLF with no other CR,
// are shorter than maxChunkLine, extensions are dropped, sizes have at most 16 hex digits, chunk
// data is followed by CRLF, and the framing may cost at most 16 KiB more than twice the data plus 16
// bytes a chunk (a sender of many one-byte chunks with long extensions is cut off). After the last
// chunk comes the trailer section (see trailerEnd). FuzzChunked holds it to
// httputil.NewChunkedReader.
type chunked struct {
	state    chunkState
	n        uint64 // data bytes left in the chunk
	line     []byte // a chunk-size line read in part
	excess   int64
	checkEnd [2]byte
	ends     int // bytes of the CRLF after chunk data read so far
}

type chunkState uint8

const (
	chunkSize    chunkState = iota // reading a chunk-size line
	chunkData                      // n bytes of data
	chunkEnd                       // the CRLF after data
	chunkTrailer                   // the last chunk was read: the trailer section follows
)

// maxChunkLine bounds a chunk-size line, its CRLF included, as net/http's reader (with its
// transport's 4 KiB buffer) bounds it.
const maxChunkLine = 4096

var (
	errChunkBareLF   = errors.New("chunked line ends with bare LF")
	errChunkCR       = errors.New("invalid CR in chunked line")
	errChunkLine     = errors.New("header line too long")
	errChunkMalform  = errors.New("malformed chunked encoding")
	errChunkExcess   = errors.New("chunked encoding contains too much non-data")
	errChunkEmptyLen = errors.New("empty hex number for chunk length")
	errChunkByte     = errors.New("invalid byte in chunk length")
	errChunkTooLarge = errors.New("http chunk length too large")
)

// feed consumes the start of in: framing, or data, which it returns (a part of in). It returns
// having consumed nothing only when in is empty or the last chunk was read (done reports it).
func (c *chunked) feed(in []byte) (consumed int, data []byte, err error) {
	switch c.state {
	case chunkData:
		k := min(uint64(len(in)), c.n)
		c.n -= k
		if c.n == 0 {
			c.state, c.ends = chunkEnd, 0
		}
		return int(k), in[:k], nil
	case chunkEnd:
		k := min(2-c.ends, len(in))
		copy(c.checkEnd[c.ends:], in[:k])
		c.ends += k
		if c.ends == 2 {
			if string(c.checkEnd[:]) != "\r\n" {
				return k, nil, errChunkMalform
			}
			c.state = chunkSize
		}
		return k, nil, nil
	case chunkSize:
		// net/http reads the line into a buffer of maxChunkLine bytes: a line that does not end
		// within it is too long.
		i := bytes.IndexByte(in, '\n')
		if i < 0 {
			if len(c.line)+len(in) >= maxChunkLine {
				return len(in), nil, errChunkLine
			}
			c.line = append(c.line, in...)
			return len(in), nil, nil
		}
		if len(c.line)+i+1 > maxChunkLine {
			return i + 1, nil, errChunkLine
		}
		line := in[:i+1]
		if len(c.line) > 0 {
			c.line = append(c.line, line...)
			line = c.line
		}
		err := c.beginChunk(line)
		c.line = c.line[:0]
		return i + 1, nil, err
	}
	return 0, nil, nil
}

// beginChunk reads a whole chunk-size line, its LF included.
func (c *chunked) beginChunk(p []byte) error {
	if idx := bytes.IndexByte(p, '\r'); idx == -1 {
		return errChunkBareLF
	} else if idx != len(p)-2 {
		return errChunkCR
	}
	p = p[:len(p)-2]
	c.excess += int64(len(p)) + 2
	for len(p) > 0 && (p[len(p)-1] == ' ' || p[len(p)-1] == '\t') {
		p = p[:len(p)-1]
	}
	p, _, _ = bytes.Cut(p, []byte(";"))
	if len(p) == 0 {
		return errChunkEmptyLen
	}
	var n uint64
	for i, b := range p {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b = b - 'a' + 10
		case 'A' <= b && b <= 'F':
			b = b - 'A' + 10
		default:
			return errChunkByte
		}
		if i == 16 {
			return errChunkTooLarge
		}
		n = n<<4 | uint64(b)
	}
	c.excess -= 16 + 2*int64(n)
	c.excess = max(c.excess, 0)
	if c.excess > 16<<10 {
		return errChunkExcess
	}
	c.n = n
	if n == 0 {
		c.state = chunkTrailer
	} else {
		c.state = chunkData
	}
	return nil
}

// done reports whether the last chunk was read (the trailer section follows).
func (c *chunked) done() bool { return c.state == chunkTrailer }

// maxTrailer bounds a trailer section, as net/http's reader bounds it by its buffer (it must see the
// section's CRLF CRLF within it).
const maxTrailer = 4096

// errTrailerTooLong is net/http's error for a trailer section whose end it cannot see.
var errTrailerTooLong = errors.New("http: suspiciously long trailer after chunked body")

// trailerEnd looks at the bytes after a last chunk (b, as much as has arrived) and returns the
// length of the trailer section, its final empty line included (2 for none), or -1 when more bytes
// are needed; an error when net/http's reader would fail on it. eof: no more bytes will come.
func trailerEnd(b []byte, eof bool) (int, error) {
	if len(b) >= 2 && b[0] == '\r' && b[1] == '\n' {
		return 2, nil
	}
	if len(b) < 2 {
		if eof {
			return 0, io.ErrUnexpectedEOF
		}
		return -1, nil
	}
	// net/http peeks for CRLF CRLF within its buffer before it parses the section.
	window := b[:min(len(b), maxTrailer)]
	if bytes.Index(window, crlfcrlf) < 0 {
		if len(b) >= maxTrailer {
			return 0, errTrailerTooLong
		}
		if eof {
			return 0, errTrailerTooLong
		}
		return -1, nil
	}
	// The section itself ends at its first empty line, LF or CRLF ended, as textproto reads it.
	if end := LooseHeadEnd(b); end >= 0 {
		return end, nil
	}
	return -1, nil
}
