package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// hostSysctls are the host-wide (not per network namespace) tunables kubelet sets at start.
var hostSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// saveHostSysctls records the current values in file ("name value" lines) unless file exists: a
// record left by a cluster that was not torn down holds the values from before its kubelets.
func saveHostSysctls(file string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	var b strings.Builder
	for _, k := range hostSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return fmt.Errorf("saving sysctl %s: %w", k, err)
		}
		fmt.Fprintf(&b, "%s %s\n", k, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// ReadHostSysctls reads the current values of the sysctls kubelet rewrites, keyed by name.
func ReadHostSysctls() (map[string]string, error) {
	m := map[string]string{}
	for _, k := range hostSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, err
		}
		m[k] = strings.TrimSpace(string(v))
	}
	return m, nil
}

// restoreHostSysctls writes back the values saveHostSysctls recorded and removes the record.
func restoreHostSysctls(file string, progress io.Writer) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		cur, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		if strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", k, v, err))
			continue
		}
		fmt.Fprintf(progress, "[cluster] restored sysctl %s=%s (was %s)\n", k, v, strings.TrimSpace(string(cur)))
	}
	if len(errs) == 0 {
		_ = os.Remove(file)
	}
	return errors.Join(errs...)
}

// cgroupHierarchies are the mounted cgroup hierarchies (v1 controllers, named and unified ones).
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var hs []string
	for _, e := range entries {
		if e.IsDir() {
			hs = append(hs, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	if len(hs) == 0 {
		hs = []string{"/sys/fs/cgroup"} // pure cgroup v2
	}
	return hs
}

// createCgroup creates the cgroup root of a node in every hierarchy (kubelet refuses a cgroupRoot
// that does not exist). A new cpuset cgroup starts without CPUs or memory nodes; it gets its parent's.
func createCgroup(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				_ = os.WriteFile(filepath.Join(dir, f), v, 0o644)
			}
		}
	}
	return nil
}

// removeCgroup removes a node's cgroup tree in every hierarchy, deepest first (a cgroup directory can
// only be removed once it has no children and no processes).
func removeCgroup(root string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		top := filepath.Join(h, root)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// killStrays SIGKILLs, by PID, what a node can leave running after kubelet and containerd stopped:
// processes inside the node's cgroup tree (pod containers, pause) and runc shims serving the node's
// containerd (found by the socket path on their command line, which is private to this cluster).
func killStrays(containerdSocket, cgroupRoot string, progress io.Writer) {
	pids := map[int]bool{}
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, cgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == containerdSocket {
				pids[pid] = true
			}
		}
	}
	for pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			fmt.Fprintf(progress, "[cluster] killed stray node process %d\n", pid)
		}
	}
}

// unmountUnder lazily unmounts every mount point at or below dir, deepest first (kubelet bind-mounts
// its root directory and mounts pod volumes; containerd pins pod network namespaces and rootfs).
func unmountUnder(dir string) error {
	points, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading /proc/self/mountinfo: %w", err)
	}
	return points, nil
}

// pruneState removes what a stopped cluster leaves in dir (etcd's data, the images and binaries it
// built, certificates, kubeconfigs, node state: hundreds of MiB a run) except the folder logDir, so
// repeated runs do not fill the disk while their logs stay to read. It removes nothing while anything
// is still mounted below dir: RemoveAll would descend into the mount and delete what it shows.
func pruneState(dir, logDir string) error {
	if dir == "" || dir == "/" {
		return fmt.Errorf("not removing the state folder %q", dir)
	}
	points, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(points) > 0 {
		return fmt.Errorf("not removing %s: %d mount points remain below it (first %s)", dir, len(points), points[0])
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if p == filepath.Clean(logDir) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space and so on).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
