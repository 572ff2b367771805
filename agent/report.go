package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/chalupa-run/chalupa/protocol"
)

// The run report spool (docs/operations.md, "Agent"): `agent report-run`
// runs in a CI job, a process apart from `agent run`, and the spool's index
// lives in its process; so run reports have a spool of their own in the
// state dir, shared by the two under an flock, which each holds only for
// an append or a delivery pass.
const (
	// ReportsDirName is the run report spool's directory in the state dir.
	ReportsDirName = "reports"
	// reportsLockName is the lock file beside it.
	reportsLockName = "reports.lock"
	// ReportLockWait bounds how long report-run waits for the running
	// agent's pass over the report spool to end: longer than one pass of a
	// few records.
	ReportLockWait = 30 * time.Second
	// reportLockPoll is how often the lock is tried while waiting.
	reportLockPoll = 50 * time.Millisecond
)

// ReportResult is what ReportRun did.
type ReportResult struct {
	// Delivered counts records (this report and any spooled before it)
	// the control plane acknowledged.
	Delivered int
	// Dropped counts records it refused for good (a conflict, a 422).
	Dropped int
	// Spooled is how many records stay in the report spool for a later
	// report-run or the running agent to deliver.
	Spooled int
	// Refused is the error code of a refusal delivery paused at (e.g.
	// deployment_not_found, unknown_key), "" when it paused for the
	// control plane being unreachable or busy: the report stays spooled
	// (at most MaxReportAge), but the caller should hear about it.
	Refused string
}

// ErrReportSpoolBusy: the report spool's lock was not free within
// ReportLockWait; nothing was spooled.
var ErrReportSpoolBusy = errors.New("the report spool is locked by another process")

// lockReports takes the report spool's lock: waiting up to wait (0: not at
// all). The returned func releases it. Errors: ErrReportSpoolBusy.
func lockReports(stateDir string, wait time.Duration) (func(), error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(stateDir, reportsLockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || !time.Now().Before(deadline) {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, ErrReportSpoolBusy
			}
			return nil, err
		}
		time.Sleep(reportLockPoll)
	}
}

// ReportRun spools one run report (POST /api/ingest/runs) durably in the
// state dir's report spool, then delivers that spool in order for at most
// ShutdownDeadline: a CI job can report while the control plane is down,
// and the report is replayed byte-identical by the next report-run or by
// the running agent (every heartbeat interval). cfg needs URL, the key and
// StateDir; report's environment and deployment are filled from cfg (the
// deployment from the running agent's state file when cfg has none).
// Errors: no deployment id known, the report does not encode, the spool
// cannot be written or is busy (ErrReportSpoolBusy); an undelivered report
// is no error (ReportResult.Spooled).
func ReportRun(ctx context.Context, cfg Config, creds Credentials, report protocol.RunReportV1) (ReportResult, error) {
	cfg = cfg.WithDefaults()
	if report.EnvironmentSlug == "" {
		report.EnvironmentSlug = cfg.Environment
	}
	if report.DeploymentID == "" {
		report.DeploymentID = cfg.DeploymentID
	}
	if report.DeploymentID == "" {
		st, err := ReadState(cfg.StateDir)
		if err != nil {
			return ReportResult{}, err
		}
		report.DeploymentID = st.DeploymentID
	}
	if report.DeploymentID == "" {
		return ReportResult{}, fmt.Errorf("%w: no deployment id (--deployment, or a running agent's state file)", ErrBadConfig)
	}
	if report.Artifacts == nil {
		report.Artifacts = []protocol.ArtifactRefV1{}
	}
	body, err := json.Marshal(report)
	if err != nil {
		return ReportResult{}, err
	}
	unlock, err := lockReports(cfg.StateDir, ReportLockWait)
	if err != nil {
		return ReportResult{}, err
	}
	defer unlock()
	sp, err := OpenSpool(filepath.Join(cfg.StateDir, ReportsDirName), cfg.SpoolMaxRecords, cfg.SpoolMaxBytes, nil)
	if err != nil {
		return ReportResult{}, err
	}
	now := cfg.Clock.Now().UTC()
	if _, err := sp.Append(Record{Route: RunsRoute, Kind: "run", Created: now, DropAfter: now.Add(MaxReportAge), Body: body}); err != nil {
		return ReportResult{}, err
	}
	hc := cfg.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: RequestTimeout}
	}
	cl := &protocol.Client{BaseURL: cfg.URL, KeyID: creds.KeyID, Key: creds.Key, HTTP: hc, Now: cfg.Clock.Now}
	// No state file: the running agent owns state.json.
	d := newDeliverer(sp, cl, cfg.Clock, cfg.Log, nil, cfg.ReplayRate)
	dctx, cancel := context.WithTimeout(ctx, ShutdownDeadline)
	defer cancel()
	var res ReportResult
	for dctx.Err() == nil {
		r := d.Pass(dctx)
		res.Delivered += r.Delivered
		res.Dropped += r.Dropped
		res.Refused = r.PausedCode
		if n, _ := sp.Depth(); n == 0 || r.Paused || r.Sent+r.Dropped == 0 {
			break
		}
	}
	res.Spooled, _ = sp.Depth()
	return res, nil
}

// DeliverReports is the running agent's pass over the report spool: when
// no report-run holds its lock, the spooled run reports are delivered
// (paced, in order, stopping at a retry). It returns what the pass did.
func (a *Agent) DeliverReports(ctx context.Context) PassResult {
	unlock, err := lockReports(a.cfg.StateDir, 0)
	if err != nil {
		return PassResult{}
	}
	defer unlock()
	dir := filepath.Join(a.cfg.StateDir, ReportsDirName)
	if _, err := os.Stat(dir); err != nil {
		return PassResult{}
	}
	sp, err := OpenSpool(dir, a.cfg.SpoolMaxRecords, a.cfg.SpoolMaxBytes, nil)
	if err != nil {
		a.log.Warn().Err(err).Msg("report spool")
		return PassResult{}
	}
	if n, _ := sp.Depth(); n == 0 {
		return PassResult{}
	}
	return newDeliverer(sp, a.client, a.clock, a.log, a.state, a.cfg.ReplayRate).Pass(ctx)
}
