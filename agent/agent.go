package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/agent/logship"
	"github.com/chalupa-run/chalupa/protocol"
)

// Version is the agentVersion heartbeats carry ("chalupa-agent/<Version>");
// the CLI sets it to the binary's version.
var Version = "dev"

// Agent is one running `chalupa agent run`: heartbeats, sampling into
// windows, and the spool's delivery (docs/operations.md, "Agent"). Its
// methods Heartbeat, Sample, Deliver and Stop are one step of work each;
// Run drives them on the clock. Heartbeat is called from one goroutine and
// Sample/Stop from another; Deliver is safe beside both.
type Agent struct {
	cfg      Config
	clock    clockwork.Clock
	log      zerolog.Logger
	id       Identity
	client   *protocol.Client
	hbClient *protocol.Client
	tracker  *IdleTracker
	sampler  *Sampler
	windower *Windower
	spool    *Spool
	deliver  *Deliverer
	state    *stateFile
	started  time.Time
	shippers []*logship.Shipper

	hbMu       sync.Mutex
	lastStatus int
}

// Start waits for the key files (polling, see WaitForCredentials) and the
// droplet's identity, then builds the agent. Errors: an unusable
// configuration or key (at once), ctx's error while waiting.
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	creds, err := WaitForCredentials(ctx, &cfg, cfg.Clock, func(err error) {
		cfg.Log.Warn().Err(err).Dur("poll", KeyPollInterval).Msg("waiting for the ingest key files (they arrive over SSH; mode 0600)")
	})
	if err != nil {
		return nil, err
	}
	id, err := waitIdentity(ctx, &cfg, cfg.Clock, func(err error) {
		cfg.Log.Warn().Err(err).Msg("waiting for the metadata service")
	})
	if err != nil {
		return nil, err
	}
	return New(cfg, creds, id)
}

// New builds an agent from a configuration whose credentials and identity
// are known: opens the state dir (0700), the state file and the spool, and
// starts a new telemetry session. Errors: the state dir or spool cannot be
// opened.
func New(cfg Config, creds Credentials, id Identity) (*Agent, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := cfg.Clock.Now().UTC()
	st, err := openState(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, clock: cfg.Clock, log: cfg.Log, id: id, state: st, started: now}
	sp, err := OpenSpool(filepath.Join(cfg.StateDir, SpoolDirName), cfg.SpoolMaxRecords, cfg.SpoolMaxBytes, func(reason DropReason, r Record) {
		_ = st.update(func(s *State) { s.Dropped[reason]++ })
		a.log.Warn().Str("kind", r.Kind).Str("reason", string(reason)).Msg("spooled record dropped")
	})
	if err != nil {
		return nil, err
	}
	a.spool = sp
	hc := cfg.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: RequestTimeout}
	}
	a.client = &protocol.Client{BaseURL: cfg.URL, KeyID: creds.KeyID, Key: creds.Key, HTTP: hc, Now: a.clock.Now}
	hb := *a.client
	a.hbClient = &hb
	a.deliver = newDeliverer(sp, a.client, a.clock, a.log, st, cfg.ReplayRate)

	prev := st.get()
	last := now
	if prev.DeploymentID == id.DeploymentID && !prev.LastActivityAt.IsZero() && prev.LastActivityAt.Before(now) {
		// A restart is not activity: carry the last activity over.
		last = prev.LastActivityAt
	}
	a.tracker = NewIdleTracker(last, cfg.ciProbe(), cfg.sources()...)
	a.tracker.Warn = func(src string, err error) {
		a.log.Warn().Str("source", src).Err(err).Msg("activity source failing")
	}
	smi := ""
	if cfg.NvidiaSMI != "" && cfg.NvidiaSMI != "none" {
		if p, err := exec.LookPath(cfg.NvidiaSMI); err == nil {
			smi = p
		}
	}
	a.sampler = &Sampler{ProcRoot: cfg.ProcRoot, DiskPath: cfg.DiskPath, NvidiaSMI: smi, Warn: func(what string, err error) {
		a.log.Warn().Str("metric", what).Err(err).Msg("sampling failing")
	}}
	if prev.SessionID != "" && !prev.SessionClosed && prev.DeploymentID == id.DeploymentID && prev.EnvironmentSlug == cfg.Environment {
		// The previous run stopped without its final window (a crash, a
		// kill, a power cut): close its session before opening another,
		// or every crash would leave one open until the open-session
		// quota refuses the deployment's windows.
		old := &Windower{EnvironmentSlug: cfg.Environment, DeploymentID: id.DeploymentID, SessionID: prev.SessionID, Start: now}
		if err := a.spoolWindow(old.Final(now)); err != nil {
			return nil, fmt.Errorf("spool the previous session's final window: %w", err)
		}
		a.log.Info().Str("session", prev.SessionID).Msg("previous session closed (the last run did not stop cleanly)")
	}
	session := ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
	a.windower = &Windower{EnvironmentSlug: cfg.Environment, DeploymentID: id.DeploymentID, SessionID: session, Start: now}
	err = st.update(func(s *State) {
		s.EnvironmentSlug, s.DeploymentID, s.DropletID, s.Region = cfg.Environment, id.DeploymentID, id.DropletID, id.Region
		s.SessionID, s.SessionClosed, s.LastActivityAt = session, false, last
	})
	if err != nil {
		return nil, fmt.Errorf("state file: %w", err)
	}
	if err := a.openShippers(hc); err != nil {
		return nil, err
	}
	a.log.Info().Str("deployment", id.DeploymentID).Int64("dropletId", id.DropletID).Str("region", id.Region).
		Str("session", session).Bool("gpu", smi != "").Msg("agent started")
	return a, nil
}

// LogTickInterval is how often each log shipper reads its source and
// ships: a tail that keeps up with a busy service without spinning.
const LogTickInterval = 5 * time.Second

// openShippers opens a log shipper per configured service; a unit without
// journalctl is skipped with a warning (the agent's heartbeats matter
// more than one service's logs). Errors: a spool cannot be opened.
func (a *Agent) openShippers(hc *http.Client) error {
	for _, l := range a.cfg.Logs {
		open := func(cursor string) logship.Source { return logship.OpenFileSource(l.Path, cursor) }
		if l.Unit != "" {
			if _, err := logship.OpenJournalSource(l.Unit, ""); err != nil {
				a.log.Warn().Err(err).Str("service", l.Service).Msg("log unit not shipped")
				continue
			}
			open = func(cursor string) logship.Source {
				js, _ := logship.OpenJournalSource(l.Unit, cursor)
				return js
			}
		}
		cl := *a.client
		sh, err := logship.Open(logship.Config{Service: l.Service, OpenSource: open, Dir: logship.DirFor(a.cfg.StateDir, l.Service),
			Environment: a.cfg.Environment, Deployment: a.id.DeploymentID, Client: &cl, HTTP: &http.Client{Timeout: logship.UploadTimeout},
			Clock: a.clock, Log: a.log})
		if err != nil {
			return fmt.Errorf("log spool %s: %w", l.Service, err)
		}
		a.shippers = append(a.shippers, sh)
	}
	return nil
}

// Shippers are the agent's log shippers, one per shipped service.
func (a *Agent) Shippers() []*logship.Shipper { return a.shippers }

// SessionID is this run's telemetry session.
func (a *Agent) SessionID() string { return a.windower.SessionID }

// Identity is the deployment the agent reports for.
func (a *Agent) Identity() Identity { return a.id }

// Spool is the agent's spool.
func (a *Agent) Spool() *Spool { return a.spool }

// Heartbeat checks activity and CI and sends one heartbeat (never spooled:
// only the newest matters). It returns the answer's status (0: none).
// Errors: the request failed or was refused.
func (a *Agent) Heartbeat(ctx context.Context) (int, error) {
	a.hbMu.Lock()
	defer a.hbMu.Unlock()
	now := a.clock.Now().UTC()
	obs := a.tracker.Check(now)
	body, err := json.Marshal(a.heartbeatBody(now, obs))
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	resp, err := a.hbClient.Post(rctx, HeartbeatRoute, body)
	status := 0
	if resp != nil {
		status = resp.Status
	}
	_ = a.state.update(func(s *State) {
		s.LastActivityAt, s.IdleChecks, s.LastHeartbeatAt, s.LastHeartbeatStatus = obs.LastActivityAt, obs.IdleChecks, now, status
	})
	if status != a.lastStatus {
		// Logged on change only: an outage is one line, not one every 30 s.
		ev := a.log.Info()
		if status/100 != 2 {
			ev = a.log.Warn().Err(err)
			if resp != nil {
				ev = ev.Str("code", errorCode(resp.Body))
			}
		}
		ev.Int("status", status).Msg("heartbeat")
		a.lastStatus = status
	}
	if err != nil {
		return status, err
	}
	if status/100 != 2 {
		return status, fmt.Errorf("heartbeat refused: %d %s", status, errorCode(resp.Body))
	}
	// The deployment exists now: a window held back by
	// deployment_not_found can go.
	a.deliver.Wake()
	return status, nil
}

func (a *Agent) heartbeatBody(now time.Time, obs Observation) protocol.HeartbeatV1 {
	hb := protocol.HeartbeatV1{
		EnvironmentSlug: a.cfg.Environment,
		Deployment:      protocol.HeartbeatDeploy{ID: a.id.DeploymentID, DropletID: a.id.DropletID, Region: a.id.Region, Size: a.cfg.Size},
		AgentVersion:    "chalupa-agent/" + Version,
		SentAt:          now,
		Reaper: protocol.ReaperObservation{
			IdleChecks: obs.IdleChecks, LimitMinutes: a.cfg.LimitMinutes,
			LastActivityAt: obs.LastActivityAt, CIActive: obs.CIActive,
		},
	}
	if !a.cfg.SessionExpiresAt.IsZero() {
		t := a.cfg.SessionExpiresAt.UTC()
		hb.SessionExpiresAt = &t
	}
	return hb
}

// Sample takes one sample and folds it into its window; when the sample
// closes a window, that window is spooled (durably, before any send) and
// delivery is woken. It returns the spooled window, or nil. Errors: the
// spool write failed (the window is lost; logged by Run).
func (a *Agent) Sample(ctx context.Context) (*protocol.WindowV1, error) {
	s := a.sampler.Take(ctx, a.clock.Now().UTC())
	w := a.windower.Add(s)
	if w == nil {
		return nil, nil
	}
	return w, a.spoolWindow(w)
}

func (a *Agent) spoolWindow(w *protocol.WindowV1) error {
	body, err := json.Marshal(w)
	if err != nil {
		return err
	}
	_, err = a.spool.Append(Record{
		Route: TelemetryRoute, Kind: "telemetry", Created: a.clock.Now().UTC(), Body: body,
		DropAfter: w.WindowStart.Add(WindowLength + protocol.MaxWindowAge),
	})
	if err != nil {
		return err
	}
	a.deliver.Wake()
	return nil
}

// ShutdownEventID is the stable id of this run's `shutdown` lifecycle
// event: the deployment's run is named by its telemetry session, a ULID of
// the agent's start, so a retry of the spooled event is deduplicated and
// another run's shutdown is another event.
func (a *Agent) ShutdownEventID() string { return "shutdown:" + a.windower.SessionID }

// spoolShutdown spools this run's `shutdown` lifecycle event (delivered
// with the final window, or replayed by the next start).
func (a *Agent) spoolShutdown(now time.Time) error {
	body, err := json.Marshal(protocol.LifecycleEventV1{
		EnvironmentSlug: a.cfg.Environment, ID: a.ShutdownEventID(), Kind: protocol.EventShutdown, OccurredAt: now,
		Deployment: protocol.LifecycleDeploy{ID: a.id.DeploymentID, DropletID: a.id.DropletID, Region: a.id.Region, Size: a.cfg.Size},
	})
	if err != nil {
		return err
	}
	_, err = a.spool.Append(Record{Route: LifecycleRoute, Kind: "lifecycle", Created: now, Body: body})
	return err
}

// Deliver runs one delivery pass over the spool (see Deliverer.Pass).
func (a *Agent) Deliver(ctx context.Context) PassResult { return a.deliver.Pass(ctx) }

// NotUntil is when the delivery's back-off after a failed attempt ends
// (zero: none); a pass before it sends nothing (docs/operations.md,
// "Agent").
func (a *Agent) NotUntil() time.Time { return a.deliver.NotUntil() }

// Stop ends the session: one last sample, the current minute's window
// spooled with final:true (with any window the last sample closed) and the
// run's `shutdown` lifecycle event, then the spool delivered for at most ShutdownDeadline, ignoring a back-off
// (one attempt). Whatever is not acknowledged stays spooled for the next
// start, which replays it byte-identical; the control plane deduplicates a
// final window whose response was lost. It returns what the drain did.
func (a *Agent) Stop() PassResult {
	now := a.clock.Now().UTC()
	s := a.sampler.Take(context.Background(), now)
	if w := a.windower.Add(s); w != nil {
		if err := a.spoolWindow(w); err != nil {
			a.log.Error().Err(err).Msg("spool the last window")
		}
	}
	if err := a.spoolWindow(a.windower.Final(now)); err != nil {
		a.log.Error().Err(err).Msg("spool the final window")
	} else {
		_ = a.state.update(func(s *State) { s.SessionClosed = true })
	}
	if err := a.spoolShutdown(now); err != nil {
		a.log.Error().Err(err).Msg("spool the shutdown event")
	}
	// A plain context cancelled by the clock (clockwork's own fake-clock
	// contexts block in Err until done, which net/http calls).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := a.clock.AfterFunc(ShutdownDeadline, cancel)
	defer deadline.Stop()
	a.deliver.mu.Lock()
	a.deliver.notUntil = time.Time{}
	a.deliver.mu.Unlock()
	var total PassResult
	for ctx.Err() == nil {
		r := a.deliver.Pass(ctx)
		total.Sent += r.Sent
		total.Delivered += r.Delivered
		total.Dropped += r.Dropped
		if n, _ := a.spool.Depth(); n == 0 || r.Paused || r.Sent+r.Dropped == 0 {
			total.Paused = r.Paused
			break
		}
	}
	n, _ := a.spool.Depth()
	a.log.Info().Int("delivered", total.Delivered).Int("spooled", n).Msg("agent stopped")
	return total
}

// Run drives the agent until ctx ends (SIGTERM): heartbeats every
// HeartbeatInterval (the first at once), each followed by a pass over the
// run report spool (ReportRun), samples every SampleInterval on
// multiples of 5 s, delivery whenever the spool has records; then Stop.
func (a *Agent) Run(ctx context.Context) error {
	bg, cancel := context.WithCancel(context.Background())
	var wg, logs sync.WaitGroup
	for _, sh := range a.shippers {
		// Each shipper stops (its final payload, within ShutdownDeadline)
		// as bg ends, beside the telemetry drain in Stop.
		logs.Add(1)
		go func() { defer logs.Done(); sh.Run(bg, LogTickInterval, ShutdownDeadline) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); a.deliver.Run(bg) }()
	go func() {
		defer wg.Done()
		for {
			_, _ = a.Heartbeat(bg)
			a.DeliverReports(bg)
			select {
			case <-bg.Done():
				return
			case <-a.clock.After(HeartbeatInterval):
			}
		}
	}()
	for {
		now := a.clock.Now()
		next := now.Truncate(SampleInterval).Add(SampleInterval)
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			a.Stop()
			logs.Wait()
			return nil
		case <-a.clock.After(next.Sub(now)):
		}
		if _, err := a.Sample(ctx); err != nil {
			a.log.Error().Err(err).Msg("spool a window")
		}
	}
}
