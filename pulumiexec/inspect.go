package pulumiexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrLocksUnreadable: the state backend is not a file:// backend, whose lock
// files the engine reads; the doctor reports the stack's lock as unknown
// (docs/operations.md, "Job doctor").
var ErrLocksUnreadable = errors.New("converge: only a file:// state backend's locks can be read")

// ErrStateCorrupt: a stack's state, or a lock file beside it, is not what
// Pulumi writes (docs/operations.md, "Job doctor").
var ErrStateCorrupt = errors.New("converge: a stack's state or lock file is not Pulumi's")

// The kinds of stack read failure the job doctor reports in place of a
// stack it cannot read (docs/operations.md, "Job doctor"): words, never
// the error's text, which may name paths.
const (
	// StackBackendUnreadable: the state backend's directory or a file in
	// it cannot be opened (missing, not a directory, permissions).
	StackBackendUnreadable = "backend_unreadable"
	// StackStateCorrupt: the state or a lock file cannot be parsed.
	StackStateCorrupt = "state_corrupt"
	// StackReadFailed: the pulumi CLI failed otherwise (it could not run,
	// or the read was cancelled).
	StackReadFailed = "pulumi_failed"
)

// StackErrorKind classifies an error of StackLocks or ViewStack as one of
// StackBackendUnreadable, StackStateCorrupt or StackReadFailed, by the
// sentinel, the file-system error, or the pulumi CLI's own words ("failed
// to load checkpoint", "corrupt store", "unable to open state
// directory"). It returns "" for nil.
func StackErrorKind(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, ErrStateCorrupt) {
		return StackStateCorrupt
	}
	msg := err.Error()
	for _, w := range []string{"failed to load checkpoint", "corrupt store", "could not deserialize"} {
		if strings.Contains(msg, w) {
			return StackStateCorrupt
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return StackBackendUnreadable
	}
	for _, w := range []string{"unable to open state directory", "permission denied", "not a directory", "no such file or directory"} {
		if strings.Contains(msg, w) {
			return StackBackendUnreadable
		}
	}
	return StackReadFailed
}

// StackLock is one lock a Pulumi process holds on a stack, read from the
// backend's lock file (never taken, never removed).
type StackLock struct {
	// PID is the holding pulumi process's id on Hostname.
	PID int
	// Hostname is the host the holder ran on.
	Hostname string
	// AcquiredAt is when the holder took the lock.
	AcquiredAt time.Time
	// HolderAlive is true when Hostname is this host and process PID
	// exists: a false value on this host means the holder is gone (a
	// SIGKILLed update) and only a cancel releases the lock.
	HolderAlive bool
}

// lockContent is the diy backend's lock file.
type lockContent struct {
	PID       int       `json:"pid"`
	Hostname  string    `json:"hostname"`
	Timestamp time.Time `json:"timestamp"`
}

// StackLocks reads the locks held on stack name (a name from
// BoxSpec.ComputeStack or DataStack) from the backend's lock files
// (.pulumi/locks/<org>/chalupa/<stack>/*.json, or the older
// .pulumi/locks/<stack>/*.json), oldest first, without taking or touching
// them; no lock is an empty list. Errors: ErrLocksUnreadable for a backend
// that is not file://; a lock file that cannot be read or parsed.
func (e *Engine) StackLocks(name string) ([]StackLock, error) {
	be := e.backend()
	if !strings.HasPrefix(be, "file://") {
		return nil, ErrLocksUnreadable
	}
	root := filepath.Join(strings.TrimPrefix(be, "file://"), ".pulumi", "locks")
	var files []string
	for _, pattern := range []string{
		filepath.Join(root, "*", Project, name, "*.json"),
		filepath.Join(root, name, "*.json"),
	} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	host, _ := os.Hostname()
	out := make([]StackLock, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // released between the listing and the read
		}
		if err != nil {
			return nil, err
		}
		var c lockContent
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("%w: stack %s: a lock file is not Pulumi's: %w", ErrStateCorrupt, name, err)
		}
		out = append(out, StackLock{PID: c.PID, Hostname: c.Hostname, AcquiredAt: c.Timestamp,
			HolderAlive: c.Hostname == host && processAlive(c.PID)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AcquiredAt.Before(out[j].AcquiredAt) })
	return out, nil
}

// processAlive reports whether process pid exists on this host (signal 0:
// nothing is delivered) and is not a zombie: a killed Pulumi CLI whose
// parent died too stays a zombie until init reaps it, which some inits do
// late, and a zombie holds no lock (docs/operations.md, "Job doctor").
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !zombie(pid)
}

// zombie reports whether /proc says pid has exited and waits to be reaped
// (state Z, or X while it is being reaped); false where /proc cannot tell.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold ") ".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}

// PendingOperation is an operation a Pulumi update began and did not
// finish, as the stack's state records it: what a killed update leaves.
type PendingOperation struct {
	// Kind is Pulumi's operation type: "creating", "updating",
	// "deleting", "reading" or "importing".
	Kind string
	// Type is the resource type token; Name its name.
	Type, Name string
	// ID is the provider id, "" for a create that had not answered.
	ID string
}

// StackView is a read of one stack's state.
type StackView struct {
	// Exists is false when the backend has no such stack (never created,
	// or wiped).
	Exists bool
	// IDs are the provider ids the state records.
	IDs StateIDs
	// Pending are the state's pending operations.
	Pending []PendingOperation
}

// ViewStack reads stack name's state through an export (ExportStack: no
// lock taken, nothing written to the stack), for the job doctor
// (docs/operations.md, "Job doctor"). Errors: the CLI's failure; a state
// that is not a deployment, wrapping ErrStateCorrupt.
func (e *Engine) ViewStack(ctx context.Context, name string) (StackView, error) {
	exp, ok, err := e.ExportStack(ctx, name)
	if err != nil || !ok {
		return StackView{}, err
	}
	v, err := viewOf(exp)
	if err != nil {
		return StackView{}, fmt.Errorf("%w: stack %s: %w", ErrStateCorrupt, name, err)
	}
	return v, nil
}

// viewOf reads an export (ExportStack's bytes) of an existing stack.
func viewOf(exp []byte) (StackView, error) {
	var dep struct {
		Deployment json.RawMessage `json:"deployment"`
	}
	if err := json.Unmarshal(exp, &dep); err != nil {
		return StackView{}, err
	}
	v := StackView{Exists: true}
	if len(dep.Deployment) == 0 || string(dep.Deployment) == "null" {
		return v, nil
	}
	ids, _, _, err := dropPending(dep.Deployment)
	if err != nil {
		return StackView{}, err
	}
	v.IDs = ids
	var st struct {
		Pending []struct {
			Resource struct {
				URN  string `json:"urn"`
				Type string `json:"type"`
				ID   string `json:"id"`
			} `json:"resource"`
			Type string `json:"type"`
		} `json:"pending_operations"`
	}
	if err := json.Unmarshal(dep.Deployment, &st); err != nil {
		return StackView{}, err
	}
	for _, p := range st.Pending {
		v.Pending = append(v.Pending, PendingOperation{Kind: p.Type, Type: p.Resource.Type,
			Name: urnName(p.Resource.URN), ID: p.Resource.ID})
	}
	return v, nil
}
