package agent

import (
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/chalupa-run/chalupa/agent/logship"
)

// StatusReport is what `chalupa agent status` prints: the reaper
// observation the agent would send now, computed from the same sources,
// and the delivery state from the state file and the spool (nothing is
// sent, nothing in the state dir is changed; docs/operations.md, "Agent").
type StatusReport struct {
	// Now is the time of the report.
	Now time.Time `json:"now"`
	// EnvironmentSlug and DeploymentID are the identity the running
	// agent recorded (empty before its first start).
	EnvironmentSlug string `json:"environmentSlug,omitempty"`
	DeploymentID    string `json:"deploymentId,omitempty"`
	// Reaper is the observation a heartbeat sent now would carry
	// (idleChecks is the last heartbeat's count, plus one if nothing new).
	Reaper StatusReaper `json:"reaper"`
	// Sources is each activity source's latest activity (or its error).
	Sources []StatusSource `json:"sources"`
	// CI describes the CI probe.
	CI string `json:"ci"`
	// LastHeartbeatAt and LastHeartbeatStatus describe the last heartbeat.
	LastHeartbeatAt     time.Time `json:"lastHeartbeatAt,omitzero"`
	LastHeartbeatStatus int       `json:"lastHeartbeatStatus,omitempty"`
	// LastDeliveryAt is when a spooled record was last acknowledged.
	LastDeliveryAt time.Time `json:"lastDeliveryAt,omitzero"`
	// Delivered counts acknowledged records since the state file began.
	Delivered int64 `json:"delivered"`
	// Spool is the spool's depth (windows and lifecycle events).
	Spool StatusSpool `json:"spool"`
	// Reports is the run-report spool's depth (`agent report-run`).
	Reports StatusSpool `json:"reports"`
	// Dropped counts records dropped undelivered, by reason.
	Dropped map[DropReason]int64 `json:"dropped"`
	// Logs is each shipped service's log spool, by service name.
	Logs []StatusLogSpool `json:"logs"`
}

// StatusLogSpool is one service's log spool in a StatusReport: its
// chunks, bytes, oldest chunk, dropped count and session state
// (logship.SpoolStatus), and the oldest chunk's age.
type StatusLogSpool struct {
	logship.SpoolStatus
	// OldestAgeSeconds is how long the oldest chunk has waited (seconds;
	// 0 with no chunk).
	OldestAgeSeconds int64 `json:"oldestAgeSeconds"`
}

// StatusReaper is the reaper observation in a StatusReport.
type StatusReaper struct {
	// LastActivityAt is the last activity (the state file's, or later
	// activity the sources show now).
	LastActivityAt time.Time `json:"lastActivityAt,omitzero"`
	// IdleChecks is the count a heartbeat sent now would carry.
	IdleChecks int64 `json:"idleChecks"`
	// LimitMinutes is the configured idle limit.
	LimitMinutes int64 `json:"limitMinutes"`
	// CIActive is true while a CI job runs.
	CIActive bool `json:"ciActive"`
	// Idle is true when the idle limit has passed since the last activity
	// (the reaper would act unless CI is active).
	Idle bool `json:"idle"`
	// IdleDeadlineAt is lastActivityAt + limitMinutes.
	IdleDeadlineAt time.Time `json:"idleDeadlineAt,omitzero"`
}

// StatusSource is one activity source in a StatusReport.
type StatusSource struct {
	// Name is the source's name ("ssh", "terminal").
	Name string `json:"name"`
	// LastActivityAt is the latest activity it shows (zero: none).
	LastActivityAt time.Time `json:"lastActivityAt,omitzero"`
	// Error is why the source could not be read.
	Error string `json:"error,omitempty"`
}

// StatusSpool is the spool's depth in a StatusReport.
type StatusSpool struct {
	// Records and Bytes are the records spooled and their size on disk.
	Records int   `json:"records"`
	Bytes   int64 `json:"bytes"`
	// Oldest is the oldest record's spool time.
	Oldest time.Time `json:"oldest,omitzero"`
}

// Status builds the report for cfg (defaults applied) without sending
// anything and without touching the state dir. Errors: the state file
// exists but cannot be read.
func Status(cfg Config) (StatusReport, error) {
	cfg = cfg.WithDefaults()
	now := cfg.Clock.Now().UTC().Truncate(time.Second)
	st, err := ReadState(cfg.StateDir)
	if err != nil {
		return StatusReport{}, err
	}
	rep := StatusReport{Now: now, EnvironmentSlug: st.EnvironmentSlug, DeploymentID: st.DeploymentID,
		CI: cfg.ciProbe().String(), LastHeartbeatAt: st.LastHeartbeatAt, LastHeartbeatStatus: st.LastHeartbeatStatus,
		LastDeliveryAt: st.LastDeliveryAt, Delivered: st.Delivered, Dropped: st.Dropped}
	last := st.LastActivityAt.UTC()
	for _, s := range cfg.sources() {
		at, err := s.LastActivity(now)
		src := StatusSource{Name: s.Name()}
		if err != nil {
			src.Error = err.Error()
		} else if !at.IsZero() {
			at = at.UTC().Truncate(time.Second)
			if at.After(now) {
				at = now
			}
			src.LastActivityAt = at
			if at.After(last) {
				last = at
			}
		}
		rep.Sources = append(rep.Sources, src)
	}
	rep.Reaper = StatusReaper{LastActivityAt: last, LimitMinutes: cfg.LimitMinutes, CIActive: cfg.ciProbe().Active()}
	if !last.IsZero() {
		if last.Equal(st.LastActivityAt.UTC()) {
			rep.Reaper.IdleChecks = st.IdleChecks + 1
		}
		rep.Reaper.IdleDeadlineAt = last.Add(time.Duration(cfg.LimitMinutes) * time.Minute)
		rep.Reaper.Idle = !now.Before(rep.Reaper.IdleDeadlineAt)
	}
	rep.Spool = spoolDepth(filepath.Join(cfg.StateDir, SpoolDirName))
	rep.Reports = spoolDepth(filepath.Join(cfg.StateDir, ReportsDirName))
	rep.Logs = []StatusLogSpool{}
	for _, l := range logship.Inspect(cfg.StateDir) {
		ls := StatusLogSpool{SpoolStatus: l}
		if !l.Oldest.IsZero() {
			ls.OldestAgeSeconds = max(0, int64(now.Sub(l.Oldest)/time.Second))
		}
		rep.Logs = append(rep.Logs, ls)
	}
	return rep, nil
}

// spoolDepth reads the spool's depth without opening it for writing.
func spoolDepth(dir string) StatusSpool {
	var out StatusSpool
	entries, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		if _, ok := parseRecordName(e.Name()); !ok {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if out.Records == 0 {
			s := &Spool{dir: dir}
			if seq, _ := parseRecordName(e.Name()); seq > 0 {
				if r, err := s.readHeader(seq); err == nil {
					out.Oldest = r.Created
				}
			}
		}
		out.Records++
		out.Bytes += fi.Size()
	}
	return out
}
