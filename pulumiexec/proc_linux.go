package pulumiexec

import "syscall"

// childProcAttr puts the CLI in its own process group (its interrupt
// reaches it alone) and kills it with the daemon: a CLI orphaned by a
// killed daemon would keep acting on a stack that crash recovery is about
// to reconcile and retry (docs/operations.md, "Jobs").
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
