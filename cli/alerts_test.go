package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/storage"
)

// TestAdminAlerts: `chalupa admin alerts` against an in-process daemon
// whose webhook sink is a loopback receiver (docs/operations.md, "Alerts",
// operating alerts): test says delivered, and with the receiver answering
// 500 says so and exits 1; the list shows the open alert and the sink; ack
// acknowledges it; mute refuses more than 24h on the command line (exit 2)
// and mutes for 2h; status shows the sink. No output names the URL.
func TestAdminAlerts(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusNoContent)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(status.Load())) }))
	t.Cleanup(rcv.Close)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{
		"CHALUPA_ALERT_WEBHOOK_URL": rcv.URL + "/hooks/T0KEN", "CHALUPA_ALERT_WEBHOOK_FORMAT": "ntfy"}})
	ctx := context.Background()
	now := time.Now().UTC()
	if err := p.App.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		return storage.InsertAlert(ctx, tx, storage.Alert{ID: "01JALERTREAPEROVERDUE00000", Kind: "reaper-overdue", SubjectKind: "platform",
			Severity: "critical", OpenedAt: now, LastSentAt: now})
	}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": p.Admin.Token, "CHALUPA_URL": p.URL}
	for _, tc := range []struct {
		name    string
		status  int32
		args    []string
		code    int
		want    []string
		notWant []string
	}{
		{"test delivered", 204, []string{"test"}, 0, []string{"webhook: delivered (message "}, nil},
		{"test a 500", 500, []string{"test", "--sink", "webhook"}, 1, []string{"webhook: FAILED, refused: webhook: the receiver answered 500"}, []string{"delivered"}},
		{"test unknown sink", 204, []string{"test", "--sink", "pager"}, 1, []string{"unknown_sink"}, nil},
		{"list", 204, nil, 0, []string{"01JALERTREAPEROVERDUE00000  critical  reaper-overdue  platform", "repeating", "alert sink webhook  ok; last delivery -; 0 pending"}, nil},
		{"ack", 204, []string{"ack", "01JALERTREAPEROVERDUE00000"}, 0, []string{"alert 01JALERTREAPEROVERDUE00000 (reaper-overdue on platform) acknowledged at "}, nil},
		{"list acknowledged", 204, []string{"list"}, 0, []string{"acknowledged 20"}, []string{"repeating"}},
		{"mute too long", 204, []string{"mute", "clock-step", "--for", "25h"}, 2, []string{"--for must be more than 0 and at most 24h0m0s"}, nil},
		{"mute without --for", 204, []string{"mute", "clock-step"}, 2, []string{"--for"}, nil},
		{"mute", 204, []string{"mute", "clock-step", "--for", "2h"}, 0, []string{"alerts of kind clock-step muted until "}, nil},
		{"list the mute", 204, nil, 0, []string{"muted clock-step    until "}, nil},
		{"unmute", 204, []string{"unmute", "clock-step"}, 0, []string{"alerts of kind clock-step unmuted"}, nil},
		{"unmute again", 204, []string{"unmute", "clock-step"}, 0, []string{"clock-step was not muted"}, []string{"alerts of kind clock-step was"}},
		{"list none recent", 204, []string{"list", "--recent", "0"}, 2, []string{"--recent must be 1–200"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status.Store(tc.status)
			out, code := runIn(env, "", append([]string{"admin", "alerts"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range append(tc.notWant, rcv.URL, "T0KEN") {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
	out, code := runIn(env, "", "admin", "status")
	if code != 0 || !strings.Contains(out, "alert sink webhook  ok; last delivery -; 0 pending") {
		t.Errorf("status (exit %d) does not show the sink:\n%s", code, out)
	}
}

// TestPrintSinks: each sink's line says ok or FAILING since when and with
// which failure, its last delivery and pending count; no sink says that
// nothing is sent.
func TestPrintSinks(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		sinks []adminapi.AlertSinkState
		want  string
	}{
		{"none", nil, "alert sinks\tnone configured: alerts are recorded, nothing is sent"},
		{"ok", []adminapi.AlertSinkState{{Name: "email", LastDeliveredAt: at}}, "alert sink email\tok; last delivery 2026-12-01T03:00:00Z; 0 pending"},
		{"failing", []adminapi.AlertSinkState{{Name: "webhook", Pending: 3, FailingSince: at, LastError: "timeout"}},
			"alert sink webhook\tFAILING since 2026-12-01T03:00:00Z (timeout); last delivery -; 3 pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printSinks(&b, tc.sinks)
			if !strings.HasPrefix(b.String(), tc.want) {
				t.Errorf("got %q, want it to start %q", b.String(), tc.want)
			}
		})
	}
}
