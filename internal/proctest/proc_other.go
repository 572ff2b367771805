//go:build !linux

package proctest

import "syscall"

// sysProcAttr is the default elsewhere; t.Cleanup still stops children.
func sysProcAttr() *syscall.SysProcAttr { return nil }
