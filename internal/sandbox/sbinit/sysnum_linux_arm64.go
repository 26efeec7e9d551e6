package sbinit

// sysTable: arm64 (AUDIT_ARCH_AARCH64); the same calls as on x86-64.
var sysTable = &syscalls{
	arch: 0xc00000b7, clone: 220, socket: 198,
	enosys: newEnosys,
	eperm: append([]uint32{117, 270, 271, 272, 97, 268, 40, 39, 41, 51, 219, 217, 218, 280, 241, 282, 105, 273, 106, 104,
		294, 89, 224, 225, 142, 116, 60, 18}, newEperm...),
}
