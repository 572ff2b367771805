// Package jobstest holds a fake jobs.Executor for tests that need a
// converge lane without the Pulumi engine (daemontest, the CLI's tests).
package jobstest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/storage"
)

// Executor is a fake jobs.Executor: each run reports Progress, then waits
// for Gate (when set) or its context, then fails for a box named in Fail or
// succeeds with a summary {"action","box"} and, for an up, a launch result
// (droplet id 1000 + the run's sequence number). Calls records every call
// in order ("execute:<box>", "recover:<box>", "cancel:<box>").
type Executor struct {
	// Progress is reported by every run, in order.
	Progress []jobs.Progress
	// Gate, when set, holds every run until a value arrives (or the run's
	// context ends: the run then returns the context's error).
	Gate chan struct{}
	// Fail maps box names to the error their runs return.
	Fail map[string]error

	mu    sync.Mutex
	calls []string
	runs  int
}

// Calls returns the calls so far.
func (e *Executor) Calls() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

func (e *Executor) record(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, s)
	e.runs++
	return e.runs
}

// Execute implements jobs.Executor.
func (e *Executor) Execute(ctx context.Context, job jobs.Job, box storage.Box, progress func(jobs.Progress)) (jobs.Outcome, error) {
	n := e.record("execute:" + box.Name)
	for _, p := range e.Progress {
		progress(p)
	}
	if e.Gate != nil {
		select {
		case <-e.Gate:
		case <-ctx.Done():
			return jobs.Outcome{}, ctx.Err()
		}
	}
	if err := e.Fail[box.Name]; err != nil {
		return jobs.Outcome{}, err
	}
	sum, _ := json.Marshal(map[string]string{"action": job.Action, "box": box.Name})
	out := jobs.Outcome{Summary: sum}
	if job.Action == jobs.ActionUp {
		id := int64(1000 + n)
		out.Resources = &storage.BoxResources{DropletID: id, FirewallID: fmt.Sprintf("fw-%d", id), VolumeID: fmt.Sprintf("vol-%d", id)}
		out.Launch = &storage.BoxLaunch{DropletID: id, IPv4: "192.0.2.10", HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAItest"}
	}
	return out, nil
}

// Recover implements jobs.Executor: it finds nothing.
func (e *Executor) Recover(ctx context.Context, job jobs.Job, box storage.Box) (*storage.BoxResources, error) {
	e.record("recover:" + box.Name)
	return nil, nil
}

// CancelLock implements jobs.Executor.
func (e *Executor) CancelLock(ctx context.Context, box storage.Box) error {
	e.record("cancel:" + box.Name)
	return nil
}
