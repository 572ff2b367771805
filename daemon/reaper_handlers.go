package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// reaperHandlers serve the reaper's operations; they hold the reaper and
// nothing else.
type reaperHandlers struct {
	reaper *reaper.Reaper
	// mode is Config.Reaper.Mode, reported by the status.
	mode string
	// tokenSet is whether the platform write token is set, whatever the
	// mode: with the reaper off it is set but handed to nobody.
	tokenSet bool
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
	out := adminapi.ReaperStatus{Mode: h.mode, TokenConfigured: h.tokenSet, DryRun: st.DryRun, CIFreshnessSeconds: st.CIFreshness.Seconds(),
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
