package daemon_test

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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
)

// TestStorageAlertReachesTheReceiverOnAFullDisk: the running daemon with
// its data directory on a tmpfs filled to ENOSPC (the free-space guard
// off, so only the disk refuses): once the database refuses writes, the
// storage-health loop raises storage-unavailable and the alerter's memory
// path delivers it, signed, to a loopback webhook receiver while nothing
// can be written; once space returns and the probe commits, its resolved
// message follows and the alert is recorded once, with both messages
// marked delivered (docs/operations.md, "Alerts").
func TestStorageAlertReachesTheReceiverOnAFullDisk(t *testing.T) {
	disk := proctest.Tmpfs(t, 48)
	// taken is one request and whether space had returned when it came.
	type taken struct {
		hookRequest
		afterSpace bool
	}
	var spaceBack atomic.Bool
	got := make(chan taken, 16)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- taken{hookRequest{r.Header.Clone(), b}, spaceBack.Load()}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{StartLoops: true, Env: map[string]string{
		"CHALUPA_DATA_DIR":             filepath.Join(disk, "data"),
		"CHALUPA_MIN_FREE_BYTES":       "0",
		"CHALUPA_ALERT_WEBHOOK_URL":    rcv.URL + "/hooks/T0KEN",
		"CHALUPA_ALERT_WEBHOOK_SECRET": secret,
	}})
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	// next returns the next storage-unavailable message the receiver took
	// (others, none expected, are skipped).
	next := func() (webhook.Body, bool) {
		t.Helper()
		for {
			var req taken
			select {
			case req = <-got:
			case <-time.After(2 * time.Minute): // a guard against a hang, not a speed goal
				t.Fatal("the webhook receiver took no storage-unavailable message")
			}
			if err := verifier.Verify(req.body, req.header); err != nil {
				t.Fatalf("the reference library refuses the signature: %v", err)
			}
			var body webhook.Body
			if err := json.Unmarshal(req.body, &body); err != nil {
				t.Fatalf("body is not the json body: %v", err)
			}
			if body.Kind == alerts.KindStorageUnavailable {
				return body, req.afterSpace
			}
			t.Logf("receiver took %s %s", body.Event, body.Kind)
		}
	}
	ctx := context.Background()
	w := p.App.DB.Writer
	probe := func() error {
		return w.Do(ctx, func(tx storage.Tx) error { return storage.WriteStorageProbe(ctx, tx, time.Now()) })
	}
	if err := probe(); err != nil {
		t.Fatalf("a write before the disk filled: %v", err)
	}
	filler := filepath.Join(disk, "filler")
	proctest.FillDisk(t, filler)
	// Keep it full: room the database frees (Litestream truncating a
	// quiet WAL) is taken again, so the fault does not come and go.
	stop, stopped := make(chan struct{}), make(chan struct{})
	var stopOnce sync.Once
	stopFilling := func() {
		stopOnce.Do(func() { close(stop) })
		<-stopped
	}
	// Before the daemon's cleanup and the unmount: the filler held open
	// keeps the tmpfs busy.
	t.Cleanup(stopFilling)
	go func() {
		defer close(stopped)
		f, err := os.OpenFile(filler, os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return
		}
		defer f.Close()
		buf := make([]byte, 4<<10)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for {
				if _, err := f.Write(buf); err != nil {
					break
				}
			}
		}
	}()
	// The WAL may take writes into room it already holds before the disk
	// refuses one.
	testwait.Eventually(t, testwait.Long, "the database to refuse a write", func() (bool, string) {
		for range 200 {
			if err := probe(); storage.IsStorageFault(err) {
				return true, ""
			} else if err != nil {
				t.Fatalf("a write on a full disk: %v, want a storage fault", err)
			}
		}
		return false, "200 writes accepted"
	})
	fired, _ := next()
	if fired.Event != alerts.Fired || fired.Severity != alerts.Critical || !strings.Contains(fired.Text, storage.FaultDiskFull) {
		t.Fatalf("first message %+v, want storage-unavailable fired, critical, naming the fault", fired)
	}
	count := func(q string, args ...any) int {
		var n int
		if err := p.App.DB.Read.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Sent without being recorded: the alerter's memory path.
	if n := count(`SELECT count(*) FROM alerts WHERE id = ?`, fired.AlertID); n != 0 {
		t.Fatalf("the alert was recorded before its message went out (%d rows): not the memory path", n)
	}

	stopFilling()
	spaceBack.Store(true)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The storage-health loop's probe (every 10 s) commits: the alert
	// resolves and, storage taking writes again, is recorded. It holds
	// until then, however the writer's state came and went on the full
	// disk (a commit that wrote nothing ends that state).
	resolved, afterSpace := next()
	for resolved.ID == fired.ID {
		resolved, afterSpace = next() // at least once: a re-send carries its id
	}
	if resolved.Event != alerts.Resolved || resolved.AlertID != fired.AlertID || !afterSpace {
		t.Fatalf("next message %+v (after space returned: %v), want alert %s resolved after space returned", resolved, afterSpace, fired.AlertID)
	}
	testwait.Eventually(t, testwait.Long, "the alert recorded once with both messages delivered", func() (bool, string) {
		a := count(`SELECT count(*) FROM alerts WHERE kind = ? AND id = ? AND resolved_at IS NOT NULL`, alerts.KindStorageUnavailable, fired.AlertID)
		msgs := count(`SELECT count(*) FROM alert_outbox WHERE alert_id = ? AND delivered_at IS NOT NULL AND id IN (?, ?)`, fired.AlertID, fired.ID, resolved.ID)
		all := count(`SELECT count(*) FROM alert_outbox WHERE id IN (?, ?)`, fired.ID, resolved.ID)
		return a == 1 && msgs == 2 && all == 2, fmt.Sprintf("%d resolved alert rows, %d of %d messages delivered", a, msgs, all)
	})
	if _, failing := w.Failing(); failing {
		t.Fatal("the writer still fails after space returned")
	}
}
