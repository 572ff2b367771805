package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// StateFileName is the agent's small state file in the state dir: what
// `agent status` shows and what a restarted agent carries over.
const StateFileName = "state.json"

// SpoolDirName is the spool's directory inside the state dir.
const SpoolDirName = "spool"

// State is what the agent records between its runs and for `agent status`
// (docs/operations.md, "Agent").
type State struct {
	// EnvironmentSlug, DeploymentID, DropletID and Region are the identity
	// the running agent resolved.
	EnvironmentSlug string `json:"environmentSlug,omitempty"`
	DeploymentID    string `json:"deploymentId,omitempty"`
	DropletID       int64  `json:"dropletId,omitempty"`
	Region          string `json:"region,omitempty"`
	// SessionID is the running agent's telemetry session.
	SessionID string `json:"sessionId,omitempty"`
	// SessionClosed is true once the agent spooled SessionID's final
	// window (a clean stop). A start that finds it false closes that
	// session first (docs/operations.md, "Agent").
	SessionClosed bool `json:"sessionClosed,omitempty"`
	// LastActivityAt is the last activity seen; a restarted agent starts
	// from it instead of its own start, so a restart does not move the
	// idle deadline.
	LastActivityAt time.Time `json:"lastActivityAt,omitzero"`
	// IdleChecks is the last heartbeat's count of consecutive idle checks.
	IdleChecks int64 `json:"idleChecks"`
	// LastHeartbeatAt and LastHeartbeatStatus describe the last heartbeat
	// attempt (status 0: no answer).
	LastHeartbeatAt     time.Time `json:"lastHeartbeatAt,omitzero"`
	LastHeartbeatStatus int       `json:"lastHeartbeatStatus,omitempty"`
	// LastDeliveryAt is when a spooled record was last acknowledged.
	LastDeliveryAt time.Time `json:"lastDeliveryAt,omitzero"`
	// Delivered counts acknowledged records.
	Delivered int64 `json:"delivered"`
	// Dropped counts records dropped undelivered, by reason.
	Dropped map[DropReason]int64 `json:"dropped"`
}

// stateFile guards the state and writes it atomically (temporary file +
// rename, 0600). It is a status file: it is not fsync'ed, since losing its
// last update to a power cut costs only a stale status.
type stateFile struct {
	path string
	mu   sync.Mutex
	st   State
}

// ReadState reads the state file in stateDir; a missing file is an empty
// State. Errors: the file exists but cannot be read or parsed.
func ReadState(stateDir string) (State, error) {
	var st State
	b, err := os.ReadFile(filepath.Join(stateDir, StateFileName))
	if errors.Is(err, os.ErrNotExist) {
		return State{Dropped: map[DropReason]int64{}}, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", StateFileName, err)
	}
	if st.Dropped == nil {
		st.Dropped = map[DropReason]int64{}
	}
	return st, nil
}

func openState(stateDir string) (*stateFile, error) {
	st, err := ReadState(stateDir)
	if err != nil {
		// A corrupt status file must not stop the agent: start afresh.
		st = State{Dropped: map[DropReason]int64{}}
	}
	return &stateFile{path: filepath.Join(stateDir, StateFileName), st: st}, nil
}

// update applies fn to the state and writes it.
// A nil stateFile (`agent report-run`, which must not race the running
// agent's writes) records nothing.
func (f *stateFile) update(fn func(*State)) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.st)
	b, err := json.MarshalIndent(f.st, "", "  ")
	if err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.path)
}

func (f *stateFile) get() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Dropped = map[DropReason]int64{}
	for k, v := range f.st.Dropped {
		st.Dropped[k] = v
	}
	return st
}
