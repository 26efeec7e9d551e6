package sbinit

// sysTable: x86-64 (AUDIT_ARCH_X86_64; x32 calls have bit 30 set).
var sysTable = &syscalls{
	arch: 0xc000003e, x32Bit: 0x40000000, clone: 56, socket: 41,
	enosys: newEnosys,
	// ptrace, process_vm_readv/writev, kcmp, unshare, setns, mount,
	// umount2, pivot_root, chroot, keyctl, add_key, request_key, bpf,
	// perf_event_open, userfaultfd, init/finit/delete_module,
	// kexec_load, kexec_file_load, acct, swapon, swapoff, reboot, syslog,
	// quotactl, lookup_dcookie.
	eperm: append([]uint32{101, 310, 311, 312, 272, 308, 165, 166, 155, 161, 250, 248, 249, 321, 298, 323, 175, 313, 176, 246,
		320, 163, 167, 168, 169, 103, 179, 212}, newEperm...),
}
