//go:build !unix

package daemon

import "time"

// processCPU is 0 where getrusage does not exist: the operations report
// then shows no CPU time.
func processCPU() time.Duration { return 0 }
