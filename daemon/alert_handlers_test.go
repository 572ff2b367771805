package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// receiver is a loopback webhook receiver answering status (204 until
// set), counting the requests it took.
type receiver struct {
	*httptest.Server
	status atomic.Int32
	took   atomic.Int32
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.status.Store(http.StatusNoContent)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.took.Add(1)
		w.WriteHeader(int(r.status.Load()))
	}))
	t.Cleanup(r.Close)
	return r
}

// TestAlertOperationsScenario: the admin API's alert operations, step by
// step on one daemon whose webhook sink is a loopback receiver
// (docs/operations.md, "Alerts", operating alerts): listing shows the open
// alert and the sink; the test message answers delivered, then the
// receiver's 500 as a refusal in the sink's words; ack and mute refuse what
// they cannot do with a clear code; a mute is recorded as an event and
// listed; status shows the sink. No answer names the webhook's URL.
func TestAlertOperationsScenario(t *testing.T) {
	ctx := context.Background()
	rcv := newReceiver(t)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{"CHALUPA_ALERT_WEBHOOK_URL": rcv.URL + "/hooks/T0KEN",
		"CHALUPA_ALERT_WEBHOOK_FORMAT": "slack"}})
	al := daemon.Alerter(p.App.Server)
	if err := al.Set(ctx, alerts.KindReaperOverdue, alerts.Subject{Kind: alerts.SubjectPlatform}, true, "3 overdue"); err != nil {
		t.Fatal(err)
	}
	l, err := p.Admin.ListAlerts(ctx, 0)
	if err != nil || len(l.Open) != 1 {
		t.Fatalf("ListAlerts: %+v, %v", l, err)
	}
	open := l.Open[0].ID
	steps := []struct {
		name     string
		before   func()
		op       string
		params   adminapi.Params
		body     string
		status   int
		code     string
		contains []string
	}{
		{name: "list", op: adminapi.OpListAlerts, status: 200,
			contains: []string{`"kind":"reaper-overdue"`, `"severity":"critical"`, `"subject":{"kind":"platform"}`, `"sinks":[{"name":"webhook","pending":1}]`, `"recent":[]`}},
		{name: "list too many", op: adminapi.OpListAlerts, params: adminapi.Params{"recent": "500"}, status: 400, code: "bad_recent"},
		{name: "list none", op: adminapi.OpListAlerts, params: adminapi.Params{"recent": "0"}, status: 400, code: "bad_recent"},
		{name: "test delivered", op: adminapi.OpTestAlertSinks, body: `{}`, status: 200, contains: []string{`"sink":"webhook"`, `"delivered":true`}},
		{name: "test a 500", before: func() { rcv.status.Store(http.StatusInternalServerError) }, op: adminapi.OpTestAlertSinks, body: `{"sink":"webhook"}`, status: 200,
			contains: []string{`"delivered":false`, `"failure":"refused"`, `"detail":"webhook: the receiver answered 500"`}},
		{name: "test a 400", before: func() { rcv.status.Store(http.StatusBadRequest) }, op: adminapi.OpTestAlertSinks, body: `{}`, status: 200,
			contains: []string{`"failure":"permanent"`, `answered 400`}},
		{name: "test unknown sink", op: adminapi.OpTestAlertSinks, body: `{"sink":"pager"}`, status: 404, code: "unknown_sink"},
		{name: "ack unknown", op: adminapi.OpAckAlert, params: adminapi.Params{"id": "01NOSUCHALERT"}, status: 404, code: "unknown_alert"},
		{name: "ack", op: adminapi.OpAckAlert, params: adminapi.Params{"id": open}, status: 200, contains: []string{`"id":"` + open + `"`, `"ackedAt":`}},
		{name: "mute unknown kind", op: adminapi.OpMuteAlertKind, params: adminapi.Params{"kind": "no-such"}, body: `{"for":"2h"}`, status: 404, code: "unknown_kind",
			contains: []string{"must be one of ", "reaper-overdue", "clock-step"}},
		{name: "mute over a day", op: adminapi.OpMuteAlertKind, params: adminapi.Params{"kind": "clock-step"}, body: `{"for":"25h"}`, status: 400, code: "mute_out_of_bounds"},
		{name: "mute no duration", op: adminapi.OpMuteAlertKind, params: adminapi.Params{"kind": "clock-step"}, body: `{"for":"soon"}`, status: 400, code: "bad_duration"},
		{name: "mute", op: adminapi.OpMuteAlertKind, params: adminapi.Params{"kind": "clock-step"}, body: `{"for":"2h"}`, status: 200,
			contains: []string{`"kind":"clock-step"`, `"until":`}},
		{name: "mute listed", op: adminapi.OpListAlerts, status: 200, contains: []string{`"mutes":[{"kind":"clock-step"`}},
		{name: "mute recorded", op: adminapi.OpListEvents, params: adminapi.Params{"kind": "alert-muted"}, status: 200,
			contains: []string{`alerts of kind clock-step muted for 2h0m0s`}},
		{name: "unmute", op: adminapi.OpUnmuteAlertKind, params: adminapi.Params{"kind": "clock-step"}, status: 200, contains: []string{`"unmuted":true`}},
		{name: "unmute again", op: adminapi.OpUnmuteAlertKind, params: adminapi.Params{"kind": "clock-step"}, status: 200, contains: []string{`"unmuted":false`}},
		{name: "status shows the sink", op: adminapi.OpGetStatus, status: 200, contains: []string{`"alertSinks":[{"name":"webhook"`}},
		{name: "ack resolved", before: func() {
			if err := al.Set(ctx, alerts.KindReaperOverdue, alerts.Subject{Kind: alerts.SubjectPlatform}, false, ""); err != nil {
				t.Fatal(err)
			}
		}, op: adminapi.OpAckAlert, params: adminapi.Params{"id": open}, status: 409, code: "alert_resolved"},
		{name: "resolved listed as recent", op: adminapi.OpListAlerts, status: 200, contains: []string{`"open":[]`, `"recent":[{"id":"` + open + `"`}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.before != nil {
				s.before()
			}
			var body []byte
			if s.body != "" {
				body = []byte(s.body)
			}
			b, err := p.Admin.Call(ctx, s.op, s.params, body)
			status, code := 200, ""
			var ae *adminapi.APIError
			if errors.As(err, &ae) {
				status, code, b = ae.Status, ae.Code, []byte(ae.Message)
			} else if err != nil {
				t.Fatal(err)
			}
			if status != s.status || code != s.code {
				t.Fatalf("answered %d %s (%s), want %d %s", status, code, b, s.status, s.code)
			}
			for _, w := range s.contains {
				if !strings.Contains(string(b), w) {
					t.Errorf("answer lacks %s:\n%s", w, b)
				}
			}
			if strings.Contains(string(b), rcv.URL) || strings.Contains(string(b), "T0KEN") {
				t.Errorf("answer names the webhook URL:\n%s", b)
			}
		})
	}
	if n := rcv.took.Load(); n != 3 {
		t.Errorf("the receiver took %d requests, want the 3 test messages (the alerter loop does not run here)", n)
	}

	bare := daemontest.NewInProcess(t, daemontest.AppOptions{})
	var ae *adminapi.APIError
	if _, err := bare.Admin.TestAlertSinks(ctx, ""); !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "no_sinks" {
		t.Errorf("test without a sink: %v, want 409 no_sinks", err)
	}
}

// TestStatusShowsAFailingSink: with the alerter running and the webhook
// receiver answering 500, admin status and the alert list show the sink
// failing (since its first failed attempt, refused) with the message
// pending; once the receiver accepts again and the retry goes out, it is
// ok with a last delivery and nothing pending.
func TestStatusShowsAFailingSink(t *testing.T) {
	ctx := context.Background()
	rcv := newReceiver(t)
	rcv.status.Store(http.StatusInternalServerError)
	clock := clockwork.NewFakeClock()
	p := daemontest.NewInProcess(t, daemontest.AppOptions{StartLoops: true, Clock: clock, Env: map[string]string{
		"CHALUPA_ALERT_WEBHOOK_URL": rcv.URL + "/hooks/T0KEN", "CHALUPA_ALERT_WEBHOOK_FORMAT": "slack"}})
	if err := daemon.Alerter(p.App.Server).Set(ctx, alerts.KindReaperOverdue, alerts.Subject{Kind: alerts.SubjectPlatform}, true, "3 overdue"); err != nil {
		t.Fatal(err)
	}
	sink := func() (adminapi.AlertSinkState, string) {
		st, err := p.Admin.GetStatus(ctx)
		if err != nil || len(st.AlertSinks) != 1 {
			t.Fatalf("status: %+v, %v", st.AlertSinks, err)
		}
		return st.AlertSinks[0], fmt.Sprintf("%+v", st.AlertSinks[0])
	}
	testwait.Eventually(t, testwait.Short, "the sink shown failing", func() (bool, string) {
		clock.Advance(alerter.Settle) // lets the new message settle; the loop waits on this clock
		s, state := sink()
		return !s.FailingSince.IsZero(), state
	})
	// Pending counts the fired message, and the hourly repeats the
	// advancing clock may have queued meanwhile.
	if s, state := sink(); s.Name != "webhook" || s.LastError != "refused" || s.Pending < 1 || !s.LastDeliveredAt.IsZero() {
		t.Fatalf("failing sink: %s, want webhook refused, pending, never delivered", state)
	}
	rcv.status.Store(http.StatusNoContent)
	testwait.Eventually(t, testwait.Short, "the sink back to ok", func() (bool, string) {
		clock.Advance(alerter.BackoffBase)
		s, state := sink()
		return s.FailingSince.IsZero() && s.Pending == 0 && !s.LastDeliveredAt.IsZero(), state
	})
}
