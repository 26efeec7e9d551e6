package sbinit

import (
	"errors"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"unsafe"
)

// init dispatches the helper before anything else of the binary runs,
// and makes every other run of the binary (the server) non-dumpable: no
// process of the same user can read its memory or its environment through
// /proc or ptrace.
func init() {
	if len(os.Args) >= 2 && os.Args[0] == Name {
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
		os.Stderr.WriteString(Name + ": unknown stage\n")
		os.Exit(2)
	}
	prctl(prSetDumpable, 0)
}

// fail reports why the sandbox could not be set up on the status pipe and
// ends the helper.
func fail(status *os.File, msg string) {
	status.WriteString("error: " + msg + "\n")
	os.Exit(125)
}

func wrap(what string, err error) error { return errors.New(what + ": " + err.Error()) }

func readPolicy() ([]byte, *Policy, error) {
	b, err := io.ReadAll(io.LimitReader(os.NewFile(3, "policy"), 16<<20))
	if err != nil {
		return nil, nil, wrap("reading the policy", err)
	}
	p, err := Decode(b)
	return b, p, err
}

// NSAttr is how the namespaced helper is cloned: new user (the caller's
// user mapped to root inside), mount, PID, IPC, UTS and — unless network
// is on — network namespaces, its own session, killed with its parent.
func NSAttr(network bool) *syscall.SysProcAttr {
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS)
	if !network {
		flags |= syscall.CLONE_NEWNET
	}
	return &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Setsid:                     true,
		Pdeathsig:                  syscall.SIGKILL,
	}
}

// spawnMain is the first stage of a server that is not root: dumpable
// again after its exec, it clones the namespaced init (and can write its
// user-namespace map), passes the policy and the status pipe on, and
// ends with it. Killed, it takes init along (init's parent-death signal).
func spawnMain() {
	status := os.NewFile(4, "status")
	raw, p, err := readPolicy()
	if err != nil {
		fail(status, err.Error())
	}
	r, w, err := os.Pipe()
	if err != nil {
		fail(status, err.Error())
	}
	proc, err := os.StartProcess("/proc/self/exe", []string{Name, "init"}, &os.ProcAttr{Env: []string{},
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, r, status}, Sys: NSAttr(p.Network)})
	if err != nil {
		fail(status, "cannot make the namespaces: "+err.Error())
	}
	r.Close()
	status.Close()
	w.Write(raw)
	w.Close()
	st, err := proc.Wait()
	if err != nil {
		os.Exit(125)
	}
	os.Exit(exitCode(st.Sys().(syscall.WaitStatus)))
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// initMain is the sandbox's first process (PID 1 of its namespace, root
// of its user namespace): it builds the file system view, confines itself
// and starts the command, then reaps until the command ends. When it
// ends, the kernel kills whatever else runs in the namespace.
func initMain() {
	status := os.NewFile(4, "status")
	_, p, err := readPolicy()
	if err != nil {
		fail(status, err.Error())
	}
	// Nothing of the sandbox may read this process's memory.
	prctl(prSetDumpable, 0)
	if err := buildRoot(p); err != nil {
		fail(status, err.Error())
	}
	if !p.Network {
		if err := loopbackUp(); err != nil {
			fail(status, "bringing up the loopback: "+err.Error())
		}
	}
	syscall.Sethostname([]byte("sandbox"))
	if err := setLimits(p); err != nil {
		fail(status, err.Error())
	}
	if err := confine(p); err != nil {
		fail(status, err.Error())
	}
	if p.Probe {
		status.WriteString("ok\n")
		os.Exit(0)
	}
	argv0, err := lookPath(p.Argv[0], p.Env)
	if err != nil {
		fail(status, err.Error())
	}
	if err := os.Chdir(p.Dir); err != nil {
		fail(status, "the working directory "+p.Dir+": "+err.Error())
	}
	// Signals are caught from before the command starts, and forwarded
	// once it runs: a signal that came between its start and the handler's
	// would meet the runtime's default, which ends PID 1 with status 2 and
	// leaves the command unsignalled.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	// The command leads a session of its own: it has no controlling
	// terminal to inject input into.
	proc, err := os.StartProcess(argv0, p.Argv, &os.ProcAttr{Dir: p.Dir, Env: p.Env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		fail(status, "cannot run "+p.Argv[0]+": "+err.Error())
	}
	go func() {
		for s := range sigs {
			syscall.Kill(-1, s.(syscall.Signal))
		}
	}()
	status.WriteString("ok\n")
	status.Close()
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
	if contains(name, '/') {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			path = kv[5:]
		}
	}
	for path != "" {
		dir := path
		path = ""
		for i := 0; i < len(dir); i++ {
			if dir[i] == ':' {
				dir, path = dir[:i], dir[i+1:]
				break
			}
		}
		if dir == "" {
			continue
		}
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(name + ": not found in the sandbox's PATH")
}

func contains(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

// parent is the directory of an absolute path.
func parent(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
}

// SystemDirs are bound read-only (links, as in a merged /usr, are copied
// as links).
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// EtcEntries are the only entries of /etc a sandbox sees: name service
// and resolver files, certificates, the dynamic linker's cache, locale and
// time zone, the Debian alternatives links, language runtimes' system
// configuration — no credentials, no server configuration.
var EtcEntries = []string{"passwd", "group", "hosts", "hostname", "host.conf", "nsswitch.conf", "resolv.conf", "gai.conf",
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
func buildRoot(p *Policy) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return wrap("making / private", err)
	}
	// A scratch root on /tmp; pivoting to it leaves the host's root (with
	// its own /tmp, uncovered) at /oldroot.
	if err := syscall.Mount("tmpfs", "/tmp", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return wrap("mounting the scratch root", err)
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
		return wrap("pivot_root", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", newRoot, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return wrap("mounting the new root", err)
	}
	for _, d := range SystemDirs {
		if err := bind(d, true, true); err != nil {
			return err
		}
	}
	for _, e := range EtcEntries {
		if err := bind("/etc/"+e, true, true); err != nil {
			return err
		}
	}
	if err := makeDev(); err != nil {
		return wrap("/dev", err)
	}
	if err := os.Mkdir(newRoot+"/proc", 0o555); err != nil {
		return err
	}
	if err := syscall.Mount("proc", newRoot+"/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return wrap("mounting /proc", err)
	}
	if err := os.Mkdir(newRoot+"/tmp", 0o1777); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", newRoot+"/tmp", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777"); err != nil {
		return wrap("mounting /tmp", err)
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
	for i := 1; i < len(w); i++ {
		for j := i; j > 0 && len(w[j]) < len(w[j-1]); j-- {
			w[j], w[j-1] = w[j-1], w[j]
		}
	}
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
		return wrap("detaching the host's root", err)
	}
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := syscall.PivotRoot(".", "."); err != nil {
		return wrap("pivot_root", err)
	}
	if err := syscall.Unmount(".", syscall.MNT_DETACH); err != nil {
		return wrap("detaching the scratch root", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	// Nothing new can be made at the root itself.
	if err := syscall.Mount("", "/", "", syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
		return wrap("making / read-only", err)
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
		return wrap(path, err)
	}
	if err := os.MkdirAll(parent(dst), 0o755); err != nil {
		return wrap(path, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil && !os.IsExist(err) {
			return wrap(path, err)
		}
		return nil
	}
	if err := mountPoint(dst, fi.IsDir()); err != nil {
		return wrap(path, err)
	}
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return wrap("binding "+path, err)
	}
	if readOnly {
		return remountReadOnly(dst)
	}
	return nil
}

// cover mounts an empty read-only file or directory over a path of the
// new root. A path that is gone, or became a link, since the server
// scanned the project is left alone (a link is never followed).
func cover(path string, dir bool) error {
	src := "/emptyfile"
	if dir {
		src = "/emptydir"
	}
	dst := newRoot + path
	if fi, err := os.Lstat(dst); err != nil || fi.Mode()&os.ModeSymlink != 0 || fi.IsDir() != dir {
		return nil
	}
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		return wrap("masking "+path, err)
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

// statfs(2) flags of a mount.
const (
	stNodev      = 4
	stNoexec     = 8
	stNoatime    = 1024
	stNodiratime = 2048
	stRelatime   = 4096
)

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
		if int64(st.Flags)&m.st != 0 {
			flags |= uintptr(m.ms)
		}
	}
	if err := syscall.Mount("", dst, "", flags, ""); err != nil {
		return wrap("making "+dst[len(newRoot):]+" read-only", err)
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
			return wrap("binding /dev/"+n, err)
		}
	}
	if err := os.Mkdir(dev+"/pts", 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("devpts", dev+"/pts", "devpts", syscall.MS_NOSUID|syscall.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return wrap("mounting /dev/pts", err)
	}
	if err := os.Mkdir(dev+"/shm", 0o1777); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dev+"/shm", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777"); err != nil {
		return err
	}
	for _, l := range [][2]string{{"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
		{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}} {
		if err := os.Symlink(l[1], dev+"/"+l[0]); err != nil {
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
	flags := (*uint16)(unsafe.Pointer(&ifr[16]))
	*flags |= syscall.IFF_UP | syscall.IFF_RUNNING
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	return nil
}

// setLimits sets the per-process limits the command inherits.
func setLimits(p *Policy) error {
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
		return err
	}
	if p.CPU > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: uint64(p.CPU), Max: uint64(p.CPU)}); err != nil {
			return wrap("RLIMIT_CPU", err)
		}
	}
	if p.Files > 0 {
		var cur syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur)
		n := min(p.Files, cur.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			return wrap("RLIMIT_NOFILE", err)
		}
	}
	return nil
}
