package daemon

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/storage"
)

// alertHandlers serve the operator's alert surfaces (docs/operations.md,
// "Alerts", operating alerts): each is one alerter method.
type alertHandlers struct {
	al *alerter.Alerter
}

// defaultRecentAlerts is adminListAlerts' recent when absent; its bounds
// are the parameter's `schema` tag.
const defaultRecentAlerts = 20

func (h *alertHandlers) register(o *operations) {
	handleOp(o, adminapi.OpListAlerts, h.list)
	handleOp(o, adminapi.OpTestAlertSinks, h.test)
	handleOp(o, adminapi.OpAckAlert, h.ack)
	handleOp(o, adminapi.OpMuteAlertKind, h.mute)
	handleOp(o, adminapi.OpUnmuteAlertKind, h.unmute)
}

func (h *alertHandlers) list(ctx context.Context, r adminapi.ListAlertsRequest) (adminapi.AlertList, error) {
	// recent's range is its parameter's `schema` tag (checkParams); an
	// explicit 0, which the parameters read as absent, refuseZeroRecent.
	n := int(r.Recent)
	if n == 0 {
		n = defaultRecentAlerts
	}
	o, err := h.al.List(ctx, n)
	if err != nil {
		return adminapi.AlertList{}, err
	}
	muted := map[string]bool{}
	out := adminapi.AlertList{Open: []adminapi.Alert{}, Recent: []adminapi.Alert{}, Sinks: alertSinksWire(o.Sinks), Mutes: []adminapi.AlertMute{}}
	for _, m := range o.Mutes {
		muted[m.Kind] = true
		out.Mutes = append(out.Mutes, adminapi.AlertMute{Kind: m.Kind, Until: m.Until, MutedAt: m.MutedAt})
	}
	for _, a := range o.Open {
		out.Open = append(out.Open, alertWire(a, muted[a.Kind]))
	}
	for _, a := range o.Recent {
		out.Recent = append(out.Recent, alertWire(a, false))
	}
	return out, nil
}

// alertWire is an alert's wire form.
func alertWire(a storage.Alert, muted bool) adminapi.Alert {
	return adminapi.Alert{ID: a.ID, Kind: a.Kind, Severity: a.Severity, Subject: adminapi.AlertSubject{Kind: a.SubjectKind, ID: a.SubjectID},
		Detail: a.Detail, OpenedAt: a.OpenedAt, ResolvedAt: a.ResolvedAt, LastSentAt: a.LastSentAt, AckedAt: a.AckedAt, Muted: muted}
}

// alertSinksWire is the sinks' states' wire form (never nil).
func alertSinksWire(ss []alerter.SinkState) []adminapi.AlertSinkState {
	out := make([]adminapi.AlertSinkState, 0, len(ss))
	for _, s := range ss {
		out = append(out, adminapi.AlertSinkState{Name: s.Name, LastDeliveredAt: s.LastDeliveredAt, Pending: s.Pending,
			FailingSince: s.FailingSince, LastError: s.LastError})
	}
	return out
}

// test sends a test message to every sink or the one named; a name that
// is no sink's (the tag's enum, docs/operations.md "OpenAPI") is 404
// unknown_sink, as one not configured.
func (h *alertHandlers) test(ctx context.Context, r adminapi.TestAlertSinksRequest) (adminapi.AlertTest, error) {
	if err := checkShapeAs(r, nil, shapeAnswer{http.StatusNotFound, "unknown_sink"}); err != nil {
		return adminapi.AlertTest{}, err
	}
	res, err := h.al.Test(ctx, r.Sink)
	switch {
	case errors.Is(err, alerter.ErrNoSinks):
		return adminapi.AlertTest{}, fail(http.StatusConflict, "no_sinks", err.Error())
	case errors.Is(err, alerter.ErrUnknownSink):
		return adminapi.AlertTest{}, fail(http.StatusNotFound, "unknown_sink", err.Error())
	case err != nil:
		return adminapi.AlertTest{}, err
	}
	out := adminapi.AlertTest{Results: make([]adminapi.AlertSinkTest, 0, len(res))}
	for _, x := range res {
		out.Results = append(out.Results, adminapi.AlertSinkTest{Sink: x.Sink, MessageID: x.MessageID, Delivered: x.Delivered, Failure: x.Failure, Detail: x.Detail})
	}
	return out, nil
}

func (h *alertHandlers) ack(ctx context.Context, r adminapi.AckAlertRequest) (adminapi.Alert, error) {
	a, err := h.al.Ack(ctx, r.ID)
	switch {
	case errors.Is(err, alerter.ErrAlertNotFound):
		return adminapi.Alert{}, fail(http.StatusNotFound, "unknown_alert", err.Error())
	case errors.Is(err, alerter.ErrAlertResolved):
		return adminapi.Alert{}, fail(http.StatusConflict, "alert_resolved", err.Error())
	case err != nil:
		return adminapi.Alert{}, err
	}
	return alertWire(a, false), nil
}

// errUnknownKind is the refusal of a kind not in the Conditions table.
// It lists the valid kinds, so the operator need not look them up.
var errUnknownKind = fail(http.StatusNotFound, "unknown_kind", "no alert condition has that kind; the kinds: "+alertKinds())

// alertKinds is the kinds of alerts.Conditions, comma-separated.
func alertKinds() string {
	kinds := make([]string, 0, len(alerts.Conditions))
	for _, c := range alerts.Conditions {
		kinds = append(kinds, c.Kind)
	}
	return strings.Join(kinds, ", ")
}

// refuseZeroRecent refuses an explicit recent=0 on adminListAlerts, which
// the parameters would read as absent (docs/operations.md, "Alerts",
// operating alerts: recent is 1–200, else 400 bad_recent). False:
// refused, answered.
func refuseZeroRecent(w http.ResponseWriter, opID string, query url.Values) bool {
	if opID == adminapi.OpListAlerts && query.Has("recent") && isZero(query.Get("recent")) {
		writeError(w, http.StatusBadRequest, "bad_recent", "recent must be 1–200")
		return false
	}
	return true
}

// mute checks for's syntax by its tag (400 bad_duration,
// docs/operations.md "OpenAPI"), then parses it (an amount that
// overflows is bad_duration too) and mutes the kind within the bounds.
func (h *alertHandlers) mute(ctx context.Context, r adminapi.MuteAlertKindRequest) (adminapi.AlertMute, error) {
	const badDuration = `for must be a duration such as "2h" or "30m"`
	if apischema.Check(r) != nil {
		return adminapi.AlertMute{}, fail(http.StatusBadRequest, "bad_duration", badDuration)
	}
	d, err := time.ParseDuration(r.For)
	if err != nil {
		return adminapi.AlertMute{}, fail(http.StatusBadRequest, "bad_duration", badDuration)
	}
	m, err := h.al.Mute(ctx, r.Kind, d, "admin")
	switch {
	case errors.Is(err, alerter.ErrUnknownKind):
		return adminapi.AlertMute{}, errUnknownKind
	case errors.Is(err, alerter.ErrMuteBounds):
		return adminapi.AlertMute{}, fail(http.StatusBadRequest, "mute_out_of_bounds", err.Error())
	case err != nil:
		return adminapi.AlertMute{}, err
	}
	return adminapi.AlertMute{Kind: m.Kind, Until: m.Until, MutedAt: m.MutedAt}, nil
}

func (h *alertHandlers) unmute(ctx context.Context, r adminapi.UnmuteAlertKindRequest) (adminapi.AlertUnmuted, error) {
	was, err := h.al.Unmute(ctx, r.Kind, "admin")
	switch {
	case errors.Is(err, alerter.ErrUnknownKind):
		return adminapi.AlertUnmuted{}, errUnknownKind
	case err != nil:
		return adminapi.AlertUnmuted{}, err
	}
	return adminapi.AlertUnmuted{Kind: r.Kind, Unmuted: was}, nil
}

// isZero reports whether s is the decimal 0 (as "0", "00" or "+0").
func isZero(s string) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n == 0
}
