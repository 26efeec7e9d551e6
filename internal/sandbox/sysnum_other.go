//go:build linux && !amd64 && !arm64

package sandbox

// sysTable: no seccomp filter on other architectures (the namespaces,
// capabilities and Landlock still confine).
var sysTable *syscalls
