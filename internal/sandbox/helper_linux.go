package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"unsafe"
)

// init dispatches the helper before anything else of the binary runs,
// and makes every other run of the binary (the server) non-dumpable: no
// process of the same user can read its memory or its environment through
// /proc or ptrace.
func init() {
	if len(os.Args) >= 2 && os.Args[0] == helperName {
		// The helper's work (namespaces, credentials, Landlock, seccomp)
		// is per thread: it all happens on the main thread, which is also
		// the one that starts the command.
		runtime.LockOSThread()
		switch os.Args[1] {
		case "spawn":
			spawnMain()
		case "init":
			initMain()
		}
		fmt.Fprintln(os.Stderr, "agentgate-sandbox: unknown stage")
		os.Exit(2)
	}
	prctl(prSetDumpable, 0)
}

// spawnMain is the first stage of a server that is not root: dumpable
// again after its exec, it clones the namespaced init (and can write its
// user-namespace map), passes the policy and the status pipe on, and
// ends with it.
func spawnMain() {
	pol, err := io.ReadAll(os.NewFile(3, "policy"))
	status := os.NewFile(4, "status")
	if err != nil {
		fmt.Fprintf(status, "error: reading the policy: %v\n", err)
		os.Exit(125)
	}
	var p policy
	if err := json.Unmarshal(pol, &p); err != nil {
		fmt.Fprintf(status, "error: the policy: %v\n", err)
		os.Exit(125)
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(status, "error: %v\n", err)
		os.Exit(125)
	}
	c := &exec.Cmd{Path: "/proc/self/exe", Args: []string{helperName, "init"}, Env: []string{},
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: []*os.File{r, status}, SysProcAttr: nsAttr(p.Network)}
	if err := c.Start(); err != nil {
		fmt.Fprintf(status, "error: cannot make the namespaces: %v\n", err)
		os.Exit(125)
	}
	r.Close()
	status.Close()
	w.Write(pol)
	w.Close()
	forward(c.Process.Pid)
	c.Wait()
	os.Exit(exitCode(c.ProcessState.Sys().(syscall.WaitStatus)))
}

// forward passes the signals that end a run on to pid.
func forward(pid int) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for s := range ch {
			syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// initMain is the sandbox's first process (PID 1 of its namespace, root
// of its user namespace): it builds the file system view, confines itself
// and starts the command, then reaps until the command ends. When it ends,
// the kernel kills whatever else runs in the namespace.
func initMain() {
	status := os.NewFile(4, "status")
	fail := func(format string, a ...any) {
		fmt.Fprintf(status, "error: "+format+"\n", a...)
		os.Exit(125)
	}
	b, err := io.ReadAll(os.NewFile(3, "policy"))
	if err != nil {
		fail("reading the policy: %v", err)
	}
	var p policy
	if err := json.Unmarshal(b, &p); err != nil {
		fail("the policy: %v", err)
	}
	// Nothing of the sandbox may read this process's memory.
	prctl(prSetDumpable, 0)
	if err := buildRoot(&p); err != nil {
		fail("%v", err)
	}
	if !p.Network {
		if err := loopbackUp(); err != nil {
			fail("bringing up the loopback: %v", err)
		}
	}
	syscall.Sethostname([]byte("sandbox"))
	if err := setLimits(&p); err != nil {
		fail("limits: %v", err)
	}
	if err := confine(&p); err != nil {
		fail("%v", err)
	}
	if p.Probe {
		fmt.Fprintln(status, "ok")
		os.Exit(0)
	}
	argv0, err := lookPath(p.Argv[0], p.Env)
	if err != nil {
		fail("%v", err)
	}
	if err := os.Chdir(p.Dir); err != nil {
		fail("the working directory %s: %v", p.Dir, err)
	}
	// The command leads a session of its own: it has no controlling
	// terminal to inject input into.
	proc, err := os.StartProcess(argv0, p.Argv, &os.ProcAttr{Dir: p.Dir, Env: p.Env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		fail("cannot run %s: %v", p.Argv[0], err)
	}
	fmt.Fprintln(status, "ok")
	status.Close()
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for s := range ch {
			syscall.Kill(-1, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid == proc.Pid {
			os.Exit(exitCode(ws))
		}
	}
}

// lookPath finds a program in the sandbox's PATH.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in the sandbox's PATH", name)
}

// systemDirs are bound read-only (links, as in a merged /usr, are copied
// as links).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcEntries are the only entries of /etc a sandbox sees: name service
// and resolver files, certificates, the dynamic linker's cache, locale and
// time zone, the Debian alternatives links — no credentials, no server
// configuration.
var etcEntries = []string{"passwd", "group", "hosts", "hostname", "host.conf", "nsswitch.conf", "resolv.conf", "gai.conf",
	"protocols", "services", "ssl", "ca-certificates", "ca-certificates.conf", "pki", "alternatives", "ld.so.cache",
	"ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "os-release", "lsb-release", "debian_version", "mime.types",
	"magic", "inputrc", "terminfo", "shells", "bash.bashrc", "gitconfig", "python3", "perl", "xdg", "java-17-openjdk",
	"java-21-openjdk", "fonts", "mtab"}

const (
	oldRoot = "/oldroot"
	newRoot = "/newroot"
)

// buildRoot makes the sandbox's root: a tmpfs holding the bound paths,
// pivoted to, the host's root detached.
func buildRoot(p *policy) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %v", err)
	}
	// A scratch root on /tmp; pivoting to it leaves the host's root (with
	// its own /tmp, uncovered) at /oldroot.
	if err := syscall.Mount("tmpfs", "/tmp", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return fmt.Errorf("mounting the scratch root: %v", err)
	}
	for _, d := range []string{"/tmp" + oldRoot, "/tmp" + newRoot, "/tmp/emptydir"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile("/tmp/emptyfile", nil, 0o444); err != nil {
		return err
	}
	if err := os.Chdir("/tmp"); err != nil {
		return err
	}
	if err := syscall.PivotRoot(".", "oldroot"); err != nil {
		return fmt.Errorf("pivot_root: %v", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", newRoot, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return fmt.Errorf("mounting the new root: %v", err)
	}
	for _, d := range systemDirs {
		if err := bind(d, true, true); err != nil {
			return err
		}
	}
	for _, e := range etcEntries {
		if err := bind("/etc/"+e, true, true); err != nil {
			return err
		}
	}
	if err := makeDev(); err != nil {
		return fmt.Errorf("/dev: %v", err)
	}
	if err := os.Mkdir(newRoot+"/proc", 0o555); err != nil {
		return err
	}
	if err := syscall.Mount("proc", newRoot+"/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %v", err)
	}
	if err := os.Mkdir(newRoot+"/tmp", 0o1777); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", newRoot+"/tmp", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mounting /tmp: %v", err)
	}
	if err := os.Mkdir(newRoot+Home, 0o700); err != nil {
		return err
	}
	for _, r := range p.ReadOnly {
		if err := bind(r, true, true); err != nil {
			return err
		}
	}
	// Shorter paths first, so that a root inside another is bound on top.
	w := append([]string(nil), p.Writable...)
	sort.Slice(w, func(i, j int) bool { return len(w[i]) < len(w[j]) })
	for _, d := range w {
		if err := bind(d, false, false); err != nil {
			return err
		}
	}
	for _, d := range p.Protect {
		if err := bind(d, true, true); err != nil {
			return err
		}
	}
	for _, f := range p.MaskFiles {
		if err := cover(f, false); err != nil {
			return err
		}
	}
	for _, d := range p.MaskDirs {
		if err := cover(d, true); err != nil {
			return err
		}
	}
	for _, h := range p.Hidden {
		if fi, err := os.Lstat(newRoot + h); err == nil && fi.Mode()&os.ModeSymlink == 0 {
			if err := cover(h, fi.IsDir()); err != nil {
				return err
			}
		}
	}
	if err := syscall.Unmount(oldRoot, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's root: %v", err)
	}
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := syscall.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %v", err)
	}
	if err := syscall.Unmount(".", syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the scratch root: %v", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	// Nothing new can be made at the root itself.
	if err := syscall.Mount("", "/", "", syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
		return fmt.Errorf("making / read-only: %v", err)
	}
	return nil
}

// bind binds the host's path at the same place in the new root; a link is
// copied as a link. Optional paths that do not exist are skipped.
func bind(path string, readOnly, optional bool) error {
	src, dst := oldRoot+path, newRoot+path
	fi, err := os.Lstat(src)
	if err != nil {
		if optional && os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("%s: %v", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil && !os.IsExist(err) {
			return fmt.Errorf("%s: %v", path, err)
		}
		return nil
	}
	if err := mountPoint(dst, fi.IsDir()); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s: %v", path, err)
	}
	if readOnly {
		return remountReadOnly(dst)
	}
	return nil
}

// cover mounts an empty read-only file or directory over a path of the
// new root.
func cover(path string, dir bool) error {
	src := "/emptyfile"
	if dir {
		src = "/emptydir"
	}
	dst := newRoot + path
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("masking %s: %v", path, err)
	}
	return remountReadOnly(dst)
}

func mountPoint(dst string, dir bool) error {
	if dir {
		return os.MkdirAll(dst, 0o755)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o444)
	if err != nil {
		if _, serr := os.Stat(dst); serr == nil {
			return nil
		}
		return err
	}
	return f.Close()
}

// remountReadOnly makes a bind mount read-only, keeping the flags the
// host locked on it (a remount that drops them is refused).
func remountReadOnly(dst string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dst, &st); err != nil {
		return err
	}
	flags := uintptr(syscall.MS_REMOUNT | syscall.MS_BIND | syscall.MS_RDONLY | syscall.MS_NOSUID)
	for _, m := range []struct{ st, ms int64 }{
		{stNodev, syscall.MS_NODEV}, {stNoexec, syscall.MS_NOEXEC}, {stNoatime, syscall.MS_NOATIME},
		{stNodiratime, syscall.MS_NODIRATIME}, {stRelatime, syscall.MS_RELATIME},
	} {
		if st.Flags&m.st != 0 {
			flags |= uintptr(m.ms)
		}
	}
	if err := syscall.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("making %s read-only: %v", strings.TrimPrefix(dst, newRoot), err)
	}
	return nil
}

// makeDev makes a minimal /dev: null, zero, full, random, urandom, tty, a
// private pts instance and shm.
func makeDev() error {
	dev := newRoot + "/dev"
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dev, "tmpfs", syscall.MS_NOSUID|syscall.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := mountPoint(dev+"/"+n, false); err != nil {
			return err
		}
		if err := syscall.Mount(oldRoot+"/dev/"+n, dev+"/"+n, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s: %v", n, err)
		}
	}
	if err := os.Mkdir(dev+"/pts", 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("devpts", dev+"/pts", "devpts", syscall.MS_NOSUID|syscall.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mounting /dev/pts: %v", err)
	}
	if err := os.Mkdir(dev+"/shm", 0o1777); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dev+"/shm", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777"); err != nil {
		return err
	}
	for link, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, dev+"/"+link); err != nil {
			return err
		}
	}
	return nil
}

// loopbackUp brings up the network namespace's own loopback.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr [40]byte // struct ifreq: the name, then the flags
	copy(ifr[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	flags := *(*uint16)(unsafe.Pointer(&ifr[16])) | syscall.IFF_UP | syscall.IFF_RUNNING
	*(*uint16)(unsafe.Pointer(&ifr[16])) = flags
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	return nil
}

// statfs(2) flags of a mount.
const (
	stNodev      = 4
	stNoexec     = 8
	stNoatime    = 1024
	stNodiratime = 2048
	stRelatime   = 4096
)

// setLimits sets the per-process limits the command inherits.
func setLimits(p *policy) error {
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
		return err
	}
	if p.CPU > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: uint64(p.CPU), Max: uint64(p.CPU)}); err != nil {
			return fmt.Errorf("RLIMIT_CPU: %v", err)
		}
	}
	if p.Files > 0 {
		var cur syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur)
		n := min(p.Files, cur.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("RLIMIT_NOFILE: %v", err)
		}
	}
	return nil
}
