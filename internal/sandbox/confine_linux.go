package sandbox

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// confine drops every privilege of the calling thread — the one that
// starts the command, which inherits all of it: no_new_privs, no
// capabilities (none can come back through an exec as root either),
// Landlock over the bound paths, the seccomp filter.
func confine(p *policy) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %v", err)
	}
	const secbits = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 // NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, each locked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, secbits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %v", err)
	}
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err == unix.EINVAL {
			break
		} else if err != nil {
			return fmt.Errorf("dropping capability %d: %v", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient capabilities: %v", err)
	}
	if err := restrictLandlock(p); err != nil {
		return fmt.Errorf("landlock: %v", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("dropping capabilities: %v", err)
	}
	if err := loadSeccomp(); err != nil {
		return fmt.Errorf("seccomp: %v", err)
	}
	return nil
}

// landlockConfig handles the file system and scoping (signals and
// abstract sockets to processes outside the sandbox); not TCP ports, so
// that a project's tests can serve on the sandbox's own loopback.
func landlockConfig() landlock.Config {
	c := landlock.V7
	c.HandledAccessNet = 0
	return c.BestEffort()
}

func restrictLandlock(p *policy) error {
	abi, err := ll.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return nil // not in this kernel: the namespaces stay the boundary
	}
	ro := append([]string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev"}, p.ReadOnly...)
	rw := append([]string{"/tmp", "/dev/shm", "/dev/pts"}, p.Writable...)
	fd, flags, err := landlockConfig().NewRulesetFD(
		landlock.RODirs(ro...).IgnoreIfMissing(),
		// Listing any directory: only what the mounts show exists.
		landlock.PathAccess(ll.AccessFSReadDir, "/"),
		landlock.RWDirs(rw...).WithRefer().IgnoreIfMissing(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom").WithIoctlDev().IgnoreIfMissing(),
		landlock.RWDirs("/dev/pts").WithIoctlDev().IgnoreIfMissing(),
	)
	if err != nil {
		return err
	}
	if fd < 0 {
		return nil
	}
	defer unix.Close(fd)
	return ll.LandlockRestrictSelf(fd, flags)
}

// landlockABI is the kernel's Landlock ABI (0: none).
func landlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// The seccomp filter refuses what namespaces do not cover: reading or
// writing other processes (ptrace, process_vm_*), new namespaces and
// mounts, kernel keyrings, BPF and perf, userfaultfd, module and kexec
// loading, io_uring (which makes sockets without socket()) and vsock
// sockets (a VM host's bridge is outside every network namespace).
// clone3 answers ENOSYS, so that C libraries fall back to clone, whose
// flags the filter can read.
func loadSeccomp() error {
	enosys := seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)
	f := seccomp.Filter{
		NoNewPrivs: true,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{
				{Action: enosys, Names: []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"}},
				{Action: seccomp.ActionErrno, Names: []string{
					"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
					"unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
					"fsconfig", "fsmount", "fspick", "mount_setattr",
					"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
					"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
					"acct", "swapon", "swapoff", "reboot", "syslog", "quotactl", "lookup_dcookie",
				}},
				{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
					{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWNS}}},
					{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWNET}}},
					{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWPID}}},
					{Name: "socket", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: unix.AF_VSOCK}}},
				}},
			},
		},
	}
	return seccomp.LoadFilter(f)
}

// layers describes the confinements a sandbox gets on this host.
func layers() []string {
	out := []string{"namespaces: user, mount, pid (fresh /proc), network, ipc, uts", "no capabilities, no_new_privs",
		"seccomp: ptrace, process_vm, io_uring, namespaces, mounts, keyrings, bpf, perf, vsock refused"}
	if abi := landlockABI(); abi > 0 {
		out = append(out, fmt.Sprintf("landlock ABI %d: file system and scoped signals and abstract sockets", abi))
	} else {
		out = append(out, "landlock: not in this kernel")
	}
	return out
}
