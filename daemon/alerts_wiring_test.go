package daemon_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
)

// hookRequest is one request the test's webhook receiver took.
type hookRequest struct {
	header http.Header
	body   []byte
}

// TestDaemonDeliversAlerts: the running daemon runs its alerter as one of
// its loops, with the configured webhook as a sink (plain http, allowed to
// a loopback receiver): a condition set on it reaches the receiver as the
// documented json body, signed as Standard Webhooks specifies; after a
// restart, the alert resolves because the reaper's re-check finds its
// condition gone (docs/operations.md, "Alerts").
func TestDaemonDeliversAlerts(t *testing.T) {
	got := make(chan hookRequest, 8)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- hookRequest{r.Header.Clone(), b}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
	opt := daemontest.AppOptions{StartLoops: true, Env: map[string]string{
		"CHALUPA_ALERT_WEBHOOK_URL":    rcv.URL + "/hooks/T0KEN",
		"CHALUPA_ALERT_WEBHOOK_SECRET": secret,
	}}
	p := daemontest.NewInProcess(t, opt)
	const detail = "3 active deployments are more than 1h0m0s past their deadline and not destroyed"
	if err := daemon.Alerter(p.App.Server).Set(context.Background(), alerts.KindReaperOverdue, alerts.Subject{Kind: alerts.SubjectPlatform}, true, detail); err != nil {
		t.Fatalf("Set: %v", err)
	}
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	next := func() (hookRequest, webhook.Body) {
		t.Helper()
		var req hookRequest
		select {
		case req = <-got:
		case <-time.After(time.Minute): // a guard against a hang, not a speed goal
			t.Fatal("the webhook receiver took no request")
		}
		if err := verifier.Verify(req.body, req.header); err != nil {
			t.Fatalf("the reference library refuses the signature: %v", err)
		}
		var body webhook.Body
		if err := json.Unmarshal(req.body, &body); err != nil {
			t.Fatalf("body is not the json body: %v", err)
		}
		return req, body
	}
	req, body := next()
	if body.Version != webhook.BodyVersion || body.ID == "" || body.ID != req.header.Get("webhook-id") || body.AlertID == "" ||
		body.Event != alerts.Fired || body.Kind != alerts.KindReaperOverdue || body.Severity != alerts.Critical ||
		len(body.Subjects) != 1 || body.Subjects[0] != (alerts.Subject{Kind: alerts.SubjectPlatform}) ||
		body.Title != "[critical] reaper-overdue on platform" || !strings.Contains(body.Text, detail) {
		t.Fatalf("body %+v (webhook-id %q), want version %d fired reaper-overdue on the platform, critical, with the detail",
			body, req.header.Get("webhook-id"), webhook.BodyVersion)
	}

	// A restart re-checks the open alert through the reaper's check: no
	// deployment is overdue, so it resolves.
	p.Restart(opt)
	_, resolved := next()
	for resolved.ID == body.ID {
		// At least once: a re-send of the fired message (its delivered
		// mark lost to the restart) carries its id, and is dropped.
		_, resolved = next()
	}
	if resolved.Event != alerts.Resolved || resolved.AlertID != body.AlertID || resolved.Kind != alerts.KindReaperOverdue {
		t.Fatalf("after the restart: %+v, want alert %s resolved", resolved, body.AlertID)
	}
}
