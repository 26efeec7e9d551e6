package sbinit

import (
	"syscall"
	"unsafe"
)

const (
	prSetDumpable        = 4
	prSetSeccomp         = 22
	prCapbsetDrop        = 24
	prSetSecurebits      = 28
	prSetNoNewPrivs      = 38
	prCapAmbient         = 47
	prCapAmbientClearAll = 4
	seccompModeFilter    = 2
	oPath                = 0x200000
)

func prctl(option, arg2 uintptr) error {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, option, arg2, 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// confine drops every privilege of the calling thread — the one that
// starts the command, which inherits all of it: no_new_privs, no
// capabilities (none can come back through an exec as root either),
// Landlock over the bound paths, the seccomp filter.
func confine(p *Policy) error {
	if err := prctl(prSetNoNewPrivs, 1); err != nil {
		return wrap("no_new_privs", err)
	}
	const secbits = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 // NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, each locked
	if err := prctl(prSetSecurebits, secbits); err != nil {
		return wrap("securebits", err)
	}
	for c := uintptr(0); c <= 63; c++ {
		if err := prctl(prCapbsetDrop, c); err == syscall.EINVAL {
			break
		} else if err != nil {
			return wrap("dropping capability "+itoa(uint64(c)), err)
		}
	}
	if err := prctl(prCapAmbient, prCapAmbientClearAll); err != nil {
		return wrap("ambient capabilities", err)
	}
	if err := restrictLandlock(p); err != nil {
		return wrap("landlock", err)
	}
	hdr := struct {
		version uint32
		pid     int32
	}{version: 0x20080522}
	var data [2]struct{ effective, permitted, inheritable uint32 }
	if _, _, e := syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return wrap("dropping capabilities", e)
	}
	if err := loadSeccomp(); err != nil {
		return wrap("seccomp", err)
	}
	return nil
}

// Landlock's system calls and file-system access rights.
const (
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446

	llExecute    = 1 << 0
	llWriteFile  = 1 << 1
	llReadFile   = 1 << 2
	llReadDir    = 1 << 3
	llRefer      = 1 << 13
	llTruncate   = 1 << 14
	llIoctlDev   = 1 << 15
	llFileRights = llExecute | llWriteFile | llReadFile | llTruncate | llIoctlDev
)

// LandlockABI is the kernel's Landlock ABI (0: none).
func LandlockABI() int {
	v, _, e := syscall.Syscall(sysLandlockCreateRuleset, 0, 0, 1)
	if e != 0 {
		return 0
	}
	return int(v)
}

// restrictLandlock confines the thread to the bound paths — the system
// and the extra read-only paths readable, the writable roots, /tmp and the
// terminal devices writable — and, from ABI 6, scopes its signals and
// abstract sockets to the sandbox. TCP is not handled, so that a project's
// tests can serve on the sandbox's own loopback.
func restrictLandlock(p *Policy) error {
	abi := LandlockABI()
	if abi < 1 {
		return nil // not in this kernel: the namespaces stay the boundary
	}
	handled := uint64(1<<13 - 1)
	if abi >= 2 {
		handled |= llRefer
	}
	if abi >= 3 {
		handled |= llTruncate
	}
	if abi >= 5 {
		handled |= llIoctlDev
	}
	attr := struct{ fs, net, scoped uint64 }{fs: handled}
	size := uintptr(8)
	switch {
	case abi >= 6:
		attr.scoped, size = 1|2, 24 // abstract Unix sockets, signals
	case abi >= 4:
		size = 16
	}
	fd, _, e := syscall.Syscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return wrap("creating a ruleset", e)
	}
	defer syscall.Close(int(fd))
	add := func(path string, access uint64) error {
		f, err := syscall.Open(path, oPath|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil // not in this sandbox
		}
		defer syscall.Close(f)
		var st syscall.Stat_t
		if err := syscall.Fstat(f, &st); err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			access &= llFileRights
		}
		rule := struct {
			access uint64
			fd     int32
		}{access & handled, int32(f)}
		if _, _, e := syscall.Syscall6(sysLandlockAddRule, fd, 1, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); e != 0 {
			return wrap(path, e)
		}
		return nil
	}
	read := uint64(llExecute | llReadFile | llReadDir)
	write := handled &^ llIoctlDev
	for _, r := range append([]string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev"}, p.ReadOnly...) {
		if err := add(r, read); err != nil {
			return err
		}
	}
	for _, w := range append([]string{"/tmp", "/dev/shm"}, p.Writable...) {
		if err := add(w, write); err != nil {
			return err
		}
	}
	for _, d := range []string{"/dev/pts", "/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom"} {
		if err := add(d, write|llIoctlDev); err != nil {
			return err
		}
	}
	// Listing any directory: only what the mounts show exists.
	if err := add("/", llReadDir); err != nil {
		return err
	}
	if _, _, e := syscall.Syscall(sysLandlockRestrictSelf, fd, 0, 0); e != 0 {
		return wrap("restricting", e)
	}
	return nil
}

// BPF and seccomp constants of the filter.
const (
	bpfLdWAbs    = 0x20
	bpfJeqK      = 0x15
	bpfJgeK      = 0x35
	bpfJsetK     = 0x45
	bpfRetK      = 0x06
	retAllow     = 0x7fff0000
	retErrno     = 0x00050000
	cloneNewMask = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID |
		syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | 0x02000000 // CLONE_NEWCGROUP
	afVsock = 40
)

// seccompProgram is the filter: what namespaces do not cover is refused —
// reading or writing other processes (ptrace, process_vm_*), new
// namespaces and mounts, kernel keyrings, BPF and perf, userfaultfd,
// module and kexec loading, io_uring (which makes sockets without
// socket()) and vsock sockets (a VM host's bridge is outside every network
// namespace). clone3 answers ENOSYS, so that C libraries fall back to
// clone, whose flags the filter can read. Calls of another architecture's
// ABI (x32, 32-bit entry points) answer ENOSYS.
func seccompProgram() []syscall.SockFilter {
	t := sysTable
	if t == nil {
		return nil
	}
	ins := func(code uint16, jt, jf uint8, k uint32) syscall.SockFilter {
		return syscall.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	enosys := uint32(retErrno | uint32(syscall.ENOSYS))
	eperm := uint32(retErrno | uint32(syscall.EPERM))
	prog := []syscall.SockFilter{
		ins(bpfLdWAbs, 0, 0, 4), // arch
		ins(bpfJeqK, 1, 0, t.arch),
		ins(bpfRetK, 0, 0, enosys),
		ins(bpfLdWAbs, 0, 0, 0), // nr
	}
	if t.x32Bit != 0 {
		prog = append(prog, ins(bpfJgeK, 0, 1, t.x32Bit), ins(bpfRetK, 0, 0, enosys))
	}
	for _, nr := range t.enosys {
		prog = append(prog, ins(bpfJeqK, 0, 1, nr), ins(bpfRetK, 0, 0, enosys))
	}
	for _, nr := range t.eperm {
		prog = append(prog, ins(bpfJeqK, 0, 1, nr), ins(bpfRetK, 0, 0, eperm))
	}
	prog = append(prog,
		ins(bpfJeqK, 0, 4, t.clone),
		ins(bpfLdWAbs, 0, 0, 16), // args[0], low half
		ins(bpfJsetK, 0, 1, cloneNewMask),
		ins(bpfRetK, 0, 0, eperm),
		ins(bpfRetK, 0, 0, retAllow),
		ins(bpfJeqK, 0, 4, t.socket),
		ins(bpfLdWAbs, 0, 0, 16),
		ins(bpfJeqK, 0, 1, afVsock),
		ins(bpfRetK, 0, 0, eperm),
		ins(bpfRetK, 0, 0, retAllow),
		ins(bpfRetK, 0, 0, retAllow),
	)
	return prog
}

// loadSeccomp installs the filter on the calling thread (no_new_privs is
// already set).
func loadSeccomp() error {
	prog := seccompProgram()
	if prog == nil {
		return nil
	}
	fprog := syscall.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetSeccomp, seccompModeFilter, uintptr(unsafe.Pointer(&fprog)), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// syscalls are one architecture's numbers the filter names.
type syscalls struct {
	arch, x32Bit  uint32
	clone, socket uint32
	enosys, eperm []uint32
}

// newSyscalls are numbered alike on every architecture.
var (
	newEnosys = []uint32{435, 425, 426, 427}                     // clone3, io_uring_setup, io_uring_enter, io_uring_register
	newEperm  = []uint32{438, 428, 429, 430, 431, 432, 433, 442} // pidfd_getfd, open_tree, move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr
)

// Seccomp reports whether the helper filters system calls on this
// architecture.
func Seccomp() bool { return sysTable != nil }
