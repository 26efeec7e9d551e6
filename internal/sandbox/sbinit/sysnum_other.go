//go:build linux && !amd64 && !arm64

package sbinit

// sysTable: no seccomp filter on other architectures (the namespaces,
// capabilities and Landlock still confine).
var sysTable *syscalls
