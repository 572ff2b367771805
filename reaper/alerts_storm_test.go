package reaper_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
)

// TestMassDueStorm is the storm of docs/operations.md "Alerts": 1,000
// deployments in 5 environments fall due at once. The reaper raises
// reaper-mass-due on each environment, and the real alerter, on the same
// fake clock, delivers them to a loopback webhook receiver (its signatures
// verified by the Standard Webhooks reference library) as one message
// naming the 5 environments and their count, within the rate cap; the
// paced ticks that follow, while the storm lasts, send nothing more.
func TestMassDueStorm(t *testing.T) {
	var mu sync.Mutex
	var got []webhook.Body
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := verifier.Verify(b, r.Header); err != nil {
			t.Errorf("the reference library refuses the signature: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var body webhook.Body
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("not the json body: %v", err)
		}
		mu.Lock()
		got = append(got, body)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	sink, err := webhook.New(webhook.Config{URL: rcv.URL + "/hooks/T0KEN", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}

	var al *alerter.Alerter
	f := newFixture(t, func(c *reaper.Config) {
		al, err = alerter.New(alerter.Config{DB: c.DB, Sinks: []alerts.Sink{sink}, Clock: c.Clock, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		c.Alerts, c.MaxDestroy = al, reaper.DefaultMaxDestroy
	})
	var slugs []string
	for e := range 5 {
		slug := fmt.Sprintf("harbor-%d", e)
		slugs = append(slugs, slug)
		env := f.env(slug)
		for range 200 {
			f.deployment(env, storage.Deployment{DropletID: f.droplet(dofake.EnvTags(slug)), IdleDeadlineAt: t0.Add(-time.Minute)})
		}
	}
	ctx := context.Background()
	deliver := func() {
		t.Helper()
		// Each look at the outbox after the storm window: the messages
		// settle, then go.
		for range 3 {
			f.clock.Advance(alerter.Settle)
			if _, err := al.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			al.Wait()
		}
	}
	for i := range 4 {
		if res := f.tick(); res.Count(reaper.ActionDestroyed) != reaper.DefaultMaxDestroy {
			t.Fatalf("tick %d destroyed %d, want the pace's %d", i, res.Count(reaper.ActionDestroyed), reaper.DefaultMaxDestroy)
		}
		deliver()
		f.clock.Advance(reaper.PaceWindow)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || len(got) > alerter.RateCap {
		t.Fatalf("the receiver took %d messages, want one (rate cap %d): %+v", len(got), alerter.RateCap, got)
	}
	m := got[0]
	var names []string
	for _, s := range m.Subjects {
		if s.Kind != alerts.SubjectEnvironment {
			t.Errorf("subject %+v is not an environment", s)
		}
		names = append(names, s.ID)
	}
	if m.Event != alerts.Fired || m.Kind != alerts.KindMassDue || m.Severity != alerts.Warning || m.More != 0 ||
		strings.Join(names, ",") != strings.Join(slugs, ",") || !strings.Contains(m.Title, "on 5 subjects") {
		t.Fatalf("message %+v (subjects %v), want reaper-mass-due fired on the 5 environments %v, counted in its title", m, names, slugs)
	}
	for _, slug := range slugs {
		if !strings.Contains(m.Text, "environment "+slug) {
			t.Errorf("the text does not name %s: %q", slug, m.Text)
		}
	}
}
