package e2e

// End-to-end tests of alert delivery (docs/operations.md, "Alerts") with
// the built binary: a condition caused from outside (DigitalOcean, here
// digitalocean/dofake, refuses the reaper's write token while a deployment
// is due), a loopback webhook receiver in the test verifying each request
// with the Standard Webhooks reference library, and the faults of the
// delivery guarantee: SIGKILL between the condition's commit and its
// delivery, and a restore from a replica whose lag held a delivered mark.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
)

// alertFaultHook is the test's webhook receiver: plain http on loopback (which
// CHALUPA_ALERT_WEBHOOK_URL allows). Every request is verified; while held,
// a request is reported on held and waits for release (then accepted) or
// for its sender to go away (then not answered at all).
type alertFaultHook struct {
	*httptest.Server
	Secret  string
	held    chan webhook.Body
	release chan struct{}

	mu       sync.Mutex
	holding  bool
	tries    []webhook.Body
	accepted []webhook.Body
}

func newAlertFaultHook(t *testing.T) *alertFaultHook {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	h := &alertFaultHook{Secret: webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key),
		held: make(chan webhook.Body, 16), release: make(chan struct{})}
	v, err := standardwebhooks.NewWebhook(h.Secret)
	if err != nil {
		t.Fatal(err)
	}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := v.Verify(b, r.Header); err != nil {
			t.Errorf("the reference library refuses a request's signature: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var body webhook.Body
		if err := json.Unmarshal(b, &body); err != nil || body.ID != r.Header.Get("webhook-id") {
			t.Errorf("a request's body (%v) does not carry its webhook-id", err)
		}
		h.mu.Lock()
		h.tries = append(h.tries, body)
		holding := h.holding
		h.mu.Unlock()
		if holding {
			h.held <- body
			select {
			case <-h.release:
			case <-r.Context().Done():
				return
			}
		}
		h.mu.Lock()
		h.accepted = append(h.accepted, body)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	t.Cleanup(h.unhold) // before Close: a held handler must return
	return h
}

// hold makes the next requests wait (see alertFaultHook).
func (h *alertFaultHook) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding = true
}

// unhold releases the held requests (accepted) and holds no more.
func (h *alertFaultHook) unhold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding {
		h.holding = false
		close(h.release)
	}
}

// acceptedWith returns the accepted requests whose webhook-id is id.
func (h *alertFaultHook) acceptedWith(id string) []webhook.Body {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []webhook.Body
	for _, b := range h.accepted {
		if b.ID == id {
			out = append(out, b)
		}
	}
	return out
}

// awaitHeld waits for a held request.
func (h *alertFaultHook) awaitHeld(t *testing.T) webhook.Body {
	t.Helper()
	select {
	case b := <-h.held:
		return b
	case <-time.After(time.Duration(testwait.Long)): // a guard against a hang, not a speed goal
		t.Fatal("the webhook receiver took no request")
		return webhook.Body{}
	}
}

// alertFaultEnv is dofake with a write and a read token, one droplet of
// environment demo-alert, and the daemon's variables for it and the hook.
func alertFaultEnv(t *testing.T, hook *alertFaultHook) (*dofake.Server, int, map[string]string) {
	t.Helper()
	fake := dofake.New(t)
	writeToken := fake.AddToken("write", dofake.FullAccess...)
	readToken := fake.AddToken("read", dofake.ReadOnly...)
	droplet := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-alert")})
	return fake, droplet.ID, map[string]string{
		"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": writeToken, "DIGITALOCEAN_READ_TOKEN": readToken,
		"CHALUPA_ALERT_WEBHOOK_URL": hook.URL + "/hooks/T0KEN-e2e", "CHALUPA_ALERT_WEBHOOK_SECRET": hook.Secret,
	}
}

// alertFaultDue makes a deployment of demo-alert on droplet due now: a
// heartbeat with a one-minute idle limit whose activity is five minutes
// old. The reaper's destroy call follows at once.
func alertFaultDue(t *testing.T, bin string, d *proctest.Daemon, droplet int) {
	t.Helper()
	ingestE2ECLI(t, bin, d, "admin", "env", "create", "demo-alert")
	keyDir := filepath.Join(t.TempDir(), "agent")
	ingestE2ECLI(t, bin, d, "admin", "keys", "issue", "demo-alert", "--out", keyDir)
	keyID, err := os.ReadFile(filepath.Join(keyDir, "key-id"))
	if err != nil {
		t.Fatal(err)
	}
	activity := filepath.Join(t.TempDir(), "activity")
	if err := os.WriteFile(activity, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	last := time.Now().Add(-5 * time.Minute)
	if err := os.Chtimes(activity, last, last); err != nil {
		t.Fatal(err)
	}
	out, code := proctest.RunCommand(t, bin, "", nil, "agent", "heartbeat", "--url", d.URL,
		"--key-id", strings.TrimSpace(string(keyID)), "--key-file", filepath.Join(keyDir, "ingest.key"),
		"--env", "demo-alert", "--deployment", "dep-alert-1", "--droplet-id", strconv.Itoa(droplet),
		"--limit-minutes", "1", "--activity-file", activity)
	if code != 0 || !strings.Contains(out, " 202 ") {
		t.Fatalf("agent heartbeat exited %d:\n%s", code, out)
	}
}

// alertFaultRow reads message id's outbox row from the database file at
// path (the daemon stopped, or reading beside it).
func alertFaultRow(t *testing.T, path, id string) storage.OutboxRow {
	t.Helper()
	ctx := context.Background()
	db, err := storage.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	row, err := storage.OutboxByID(ctx, db.Read, id)
	if err != nil {
		t.Fatalf("message %s in %s: %v", id, filepath.Base(path), err)
	}
	return row
}

// alertFaultFired checks that b is a fired message about the refused write
// token: reaper-token-refused (the reaper's destroy call), or
// do-token-refused (the token checks' read-only call at start, which can
// come first; docs/operations.md, "Alerts"). Either is a committed message
// whose delivery the fault tests follow.
func alertFaultFired(t *testing.T, b webhook.Body) {
	t.Helper()
	if b.ID == "" || b.Event != alerts.Fired || (b.Kind != alerts.KindReaperTokenRefused && b.Kind != alerts.KindDOTokenRefused) ||
		b.Severity != alerts.Critical {
		t.Fatalf("the receiver's request %+v, want a fired message about the refused write token", b)
	}
}

// TestAlertSurvivesSIGKILL: DigitalOcean refuses the reaper's write token
// with a deployment due, so the reaper raises reaper-token-refused; its
// message reaches the receiver, which holds the request unanswered; the
// daemon is killed with SIGKILL there, between the commit and the
// delivery. Restarted on the same data directory, it delivers the
// message with the same webhook-id.
func TestAlertSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	hook := newAlertFaultHook(t)
	fake, droplet, env := alertFaultEnv(t, hook)
	d := proctest.StartDaemon(t, bin, env)
	fake.RevokeToken("write")
	hook.hold()
	alertFaultDue(t, bin, d, droplet)

	first := hook.awaitHeld(t)
	alertFaultFired(t, first)
	d.Kill()
	if row := alertFaultRow(t, d.DatabasePath(), first.ID); !row.DeliveredAt.IsZero() {
		t.Fatalf("message %s marked delivered before the kill: the receiver never answered", first.ID)
	}
	hook.unhold()

	again := proctest.StartDaemon(t, bin, d.EnvCopy())
	testwait.Eventually(t, testwait.Long, "the message delivered after the restart", func() (bool, string) {
		n := len(hook.acceptedWith(first.ID))
		return n > 0, fmt.Sprintf("%d accepted with webhook-id %s", n, first.ID)
	})
	got := hook.acceptedWith(first.ID)[0]
	alertFaultFired(t, got)
	if got.AlertID != first.AlertID {
		t.Errorf("after the restart: alert %s, want %s", got.AlertID, first.AlertID)
	}
	ingestE2EStop(t, again)
	if row := alertFaultRow(t, again.DatabasePath(), first.ID); row.DeliveredAt.IsZero() {
		t.Errorf("message %s not marked delivered after the restart", first.ID)
	}
	ingestE2ENoSecrets(t, map[string]string{"webhook secret": hook.Secret, "webhook token": "T0KEN-e2e"},
		map[string]string{"first daemon's logs": d.Logs(), "restarted daemon's logs": again.Logs()})
}

// TestAlertResentAfterRestore: the replica (versitygw) holds the fired
// message's outbox row, then stops taking writes; the receiver accepts the
// message, so the delivered mark is committed on the primary but stays in
// the replica's lag; the primary is lost (SIGKILL). The real `litestream
// restore` brings back the row without its mark, and the daemon serving
// the restored database sends the message again with the same webhook-id
// (docs/operations.md, "Alerts": a restore can re-send messages delivered
// in the replica's lag).
func TestAlertResentAfterRestore(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	litestream := proctest.ToolPath(t, "litestream")
	s3 := proctest.StartVersityGW(t)
	hook := newAlertFaultHook(t)
	fake, droplet, env := alertFaultEnv(t, hook)
	for k, v := range s3.DaemonEnv("alerts") {
		env[k] = v
	}
	d := proctest.StartDaemon(t, bin, env)
	fake.RevokeToken("write")
	hook.hold()
	alertFaultDue(t, bin, d, droplet)
	first := hook.awaitHeld(t)
	alertFaultFired(t, first)

	// The row is committed (it is being sent); wait for the replica to
	// hold it, then stop the replica.
	ctx := context.Background()
	testwait.Eventually(t, testwait.Long, "the replica to catch up with the message's commit", func() (bool, string) {
		st, err := d.Admin().GetStatus(ctx)
		if err != nil {
			return false, err.Error()
		}
		h := st.Replication
		return h.LocalTXID > 0 && h.RemoteTXID == h.LocalTXID, fmt.Sprintf("local %d remote %d", h.LocalTXID, h.RemoteTXID)
	})
	s3.Stop()
	hook.unhold()
	testwait.Eventually(t, testwait.Long, "the delivered mark on the primary", func() (bool, string) {
		row := alertFaultRow(t, d.DatabasePath(), first.ID)
		return !row.DeliveredAt.IsZero(), fmt.Sprintf("%d attempts", row.Attempts)
	})
	d.Kill()
	if n := len(hook.acceptedWith(first.ID)); n != 1 {
		t.Fatalf("accepted %d times before the restore, want 1", n)
	}

	s3.Start()
	restored := proctest.Restore(t, litestream, s3.ReplicaURL("alerts"), s3.Credentials())
	if row := alertFaultRow(t, restored, first.ID); !row.DeliveredAt.IsZero() {
		t.Fatalf("the restored message %s carries its delivered mark: the replica had no lag to lose", first.ID)
	}
	env2 := e2eSecrets(d.Env)
	for _, k := range []string{"CHALUPA_DO_API_URL", "DIGITALOCEAN_WRITE_TOKEN", "DIGITALOCEAN_READ_TOKEN", "CHALUPA_ALERT_WEBHOOK_URL", "CHALUPA_ALERT_WEBHOOK_SECRET"} {
		env2[k] = env[k]
	}
	env2["CHALUPA_DATA_DIR"] = t.TempDir()
	e2eCopyFile(t, restored, filepath.Join(env2["CHALUPA_DATA_DIR"], "chalupa.db"))
	fromReplica := proctest.StartDaemon(t, bin, env2)
	testwait.Eventually(t, testwait.Long, "the message re-sent from the restored database", func() (bool, string) {
		n := len(hook.acceptedWith(first.ID))
		return n == 2, fmt.Sprintf("%d accepted with webhook-id %s", n, first.ID)
	})
	got := hook.acceptedWith(first.ID)[1]
	alertFaultFired(t, got)
	if got.AlertID != first.AlertID {
		t.Errorf("re-sent for alert %s, want %s", got.AlertID, first.AlertID)
	}
	ingestE2EStop(t, fromReplica)
}
