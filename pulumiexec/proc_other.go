//go:build !linux

package pulumiexec

import "syscall"

// childProcAttr puts the CLI in its own process group. Only Linux can kill
// it with the daemon (Pdeathsig); chalupa serves on Linux.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
