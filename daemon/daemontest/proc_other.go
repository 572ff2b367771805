//go:build !linux

package daemontest

import "syscall"

// sysProcAttr is the default elsewhere; t.Cleanup still stops children.
func sysProcAttr() *syscall.SysProcAttr { return nil }
