package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// newReaper builds the reaper from the configuration: the write token goes
// into its client here and nowhere else (docs/architecture.md, "Dependency
// direction"). Without the write token the reaper has no
// credentials: it is not started, and its status says so. Errors: a
// client that cannot be built, or metrics already registered.
//
// customers opens customer organizations' own tokens for the customer
// sweep (docs/operations.md, "Customer organizations").
//
// guard is the clock guard ingest feeds. The storage-fault hold
// (reaper.Config.StorageFault) reads the writer's storage health: while
// commits fail a deadline that could not move is not evidence
// (docs/operations.md, "Reaper").
func newReaper(cfg *Config, db *storage.DB, svc *ingest.Service, guard *clockguard.Guard, clock clockwork.Clock, log zerolog.Logger,
	reg prometheus.Registerer, customers *reaper.CustomerTokens) (*reaper.Reaper, error) {
	m, err := reaper.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	rc := reaper.Config{DB: db, Clock: clock, Log: log, DryRun: cfg.ReaperDryRun, CIFreshness: cfg.ReaperCIFreshness,
		Wake: svc.DeadlineActivity(), Metrics: m, Guard: guard, MaxDestroy: cfg.ReaperMaxDestroy,
		StorageFault: storageFault(db.Writer, clock)}
	if customers != nil {
		rc.Customers = customers
	}
	if tok := cfg.writeToken(); tok != "" && cfg.ReaperMode != ReaperModeOff {
		write, err := digitalocean.New(digitalocean.Config{BaseURL: cfg.DOAPIURL, Token: digitalocean.Token(tok.Reveal()), Label: "write",
			Version: buildinfo.Version, Clock: clock, Logger: log})
		if err != nil {
			return nil, err
		}
		rc.Credentials = reaper.Platform{Write: write}
	} else {
		log.Warn().Str("reaper", ReaperModeOff).Msg(reaperOffMessage + " (docs/operations.md, \"Reaper\")")
	}
	return reaper.New(rc), nil
}

// storageFault adapts the writer's storage health to the reaper's hold. The
// writer stamps faults with the process's wall clock; the last fault's age
// (monotonic) is carried onto the reaper's clock, so the hold stays right
// whatever that clock reads.
func storageFault(w *storage.Writer, clock clockwork.Clock) func() (bool, time.Time) {
	return func() (bool, time.Time) {
		h := w.StorageHealth()
		if h.LastFaultAt.IsZero() {
			return h.Failing, time.Time{}
		}
		return h.Failing, clock.Now().Add(-time.Since(h.LastFaultAt))
	}
}

// reaperHandlers serve the reaper's operations; they hold the reaper and
// nothing else.
type reaperHandlers struct {
	reaper *reaper.Reaper
	// mode is Config.ReaperMode, reported by the status.
	mode string
}

func (h *reaperHandlers) register(o *operations) {
	handleOp(o, adminapi.OpRunReaperTick, h.tick)
	handleOp(o, adminapi.OpGetReaperStatus, h.status)
}

func (h *reaperHandlers) tick(ctx context.Context, _ adminapi.RunReaperTickRequest) (adminapi.ReaperTick, error) {
	res, err := h.reaper.Tick(ctx)
	if errors.Is(err, reaper.ErrNotConfigured) {
		return adminapi.ReaperTick{}, fail(http.StatusConflict, "reaper_not_configured", reaperOffMessage)
	}
	if err != nil {
		return adminapi.ReaperTick{}, err
	}
	return tickWire(res), nil
}

func (h *reaperHandlers) status(ctx context.Context, _ none) (adminapi.ReaperStatus, error) {
	st, err := h.reaper.Status(ctx)
	if err != nil {
		return adminapi.ReaperStatus{}, err
	}
	out := adminapi.ReaperStatus{Mode: h.mode, TokenConfigured: st.Configured, DryRun: st.DryRun, CIFreshnessSeconds: st.CIFreshness.Seconds(),
		NextWakeAt: st.NextWake, RateLimitedUntil: st.RateLimitedUntil, ActiveDeployments: st.Active, Due: []adminapi.ReaperDue{}}
	for _, c := range st.Due {
		out.Due = append(out.Due, adminapi.ReaperDue{Environment: c.EnvironmentSlug, Deployment: c.DeploymentID, DropletID: c.DropletID,
			DecideAt: c.DecideAt, IdleDeadlineAt: c.IdleDeadlineAt, SessionExpiresAt: c.SessionExpiresAt, CIActive: c.CIActive})
	}
	if st.LastTick != nil {
		t := tickWire(*st.LastTick)
		out.LastTick = &t
	}
	out.Clock, out.GraceUntil, out.StorageHeldUntil, out.MaxDestroyPerMinute = clockWire(st.Clock), st.GraceUntil, st.StorageHeldUntil, st.MaxDestroy
	out.Held, out.HeldTotal = make([]adminapi.ReaperHeld, 0, len(st.Held)), st.HeldTotal
	for _, h := range st.Held {
		out.Held = append(out.Held, adminapi.ReaperHeld{Environment: h.EnvironmentSlug, Deployment: h.DeploymentID, DropletID: h.DropletID,
			Reason: h.Hold.Reason, Evidence: h.Hold.Evidence, Until: h.Hold.Until.UTC(), MaxSeconds: h.Hold.Max.Seconds()})
	}
	return out, nil
}

// clockWarning is the console's words for the clock guard's hold ("" when
// none).
func clockWarning(st clockguard.State) string {
	c := clockWire(st)
	if c.Hold == nil {
		return ""
	}
	return fmt.Sprintf("the reaper destroys nothing: %s (server clock %+.0f s off the fleet, since %s). See docs/operations.md, \"Reaper\".",
		c.Hold.Reason, c.Hold.OffsetSeconds, c.Hold.Since.Format(time.RFC3339))
}

// clockWire is the wire form of the clock guard's state.
func clockWire(st clockguard.State) adminapi.ClockGuard {
	var out adminapi.ClockGuard
	if h := st.Global; h != nil {
		out.Suspect, out.Hold = true, &adminapi.ClockHold{Reason: h.Reason, Since: h.Since.UTC(), OffsetSeconds: h.Offset.Seconds(),
			Agreed: h.Agreed, SessionsHeld: h.HoldsSessions()}
	}
	return out
}

func tickWire(res reaper.TickResult) adminapi.ReaperTick {
	out := adminapi.ReaperTick{At: res.At, DryRun: res.DryRun, More: res.More, RateLimitedUntil: res.RateLimitedUntil,
		Outcomes: make([]adminapi.ReaperOutcome, 0, len(res.Outcomes))}
	for _, o := range res.Outcomes {
		out.Outcomes = append(out.Outcomes, adminapi.ReaperOutcome{Environment: o.Environment, Deployment: o.Deployment,
			DropletID: o.DropletID, Action: o.Action, Reason: o.Reason, Detail: o.Detail, Organization: o.Organization})
	}
	out.CustomerOrgs, out.CustomerBudgetSpent = res.CustomerOrgs, res.CustomerBudgetSpent
	return out
}

// eventHandlers list lifecycle events.
type eventHandlers struct {
	db *storage.DB
}

func (h *eventHandlers) register(o *operations) {
	handleOp(o, adminapi.OpListEvents, h.list)
}

func (h *eventHandlers) list(ctx context.Context, req adminapi.ListEventsRequest) (adminapi.EventList, error) {
	rows, err := storage.ListLifecycleEvents(ctx, h.db.Read, storage.EventFilter{
		EnvironmentSlug: req.Environment, Kind: req.Kind, Limit: adminapi.MaxEvents})
	if err != nil {
		return adminapi.EventList{}, err
	}
	out := adminapi.EventList{Events: make([]adminapi.Event, 0, len(rows))}
	for _, r := range rows {
		out.Events = append(out.Events, adminapi.Event{ID: r.ID, Environment: r.EnvironmentSlug, Deployment: r.DeploymentID,
			Kind: r.Kind, Reason: r.Reason, Message: r.Message, OccurredAt: r.OccurredAt})
	}
	return out, nil
}
