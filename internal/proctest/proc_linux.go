package proctest

import "syscall"

// sysProcAttr makes a child die with the test process (a panicking or
// timed-out test binary must not leave daemons or S3 servers behind).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
