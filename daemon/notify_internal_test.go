package daemon

import (
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/digest"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestDigestLoopOnlyWhenConfigured: without CHALUPA_ALERT_DIGEST there is
// no digest and no digest loop (so no timer); with it the loops hold one,
// never switched (docs/operations.md, "Alerts", under Digest).
func TestDigestLoopOnlyWhenConfigured(t *testing.T) {
	db := storagetest.NewDB(t)
	clock := clockwork.NewFakeClock()
	al, err := alerter.New(alerter.Config{DB: db, Clock: clock, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	w := &workers{alerter: al}
	for _, tc := range []struct {
		name   string
		digest string
		want   bool
	}{
		{"unset", "", false},
		{"07:30", "07:30", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{Notify: NotifyConfig{Digest: tc.digest, DigestSchedule: digest.Schedule{Hour: 7, Minute: 30}}}
			d, err := newNotify(cfg, db, clock, zerolog.Nop(), w)
			if err != nil {
				t.Fatal(err)
			}
			loops, err := registeredLoops(LoopDeps{DB: db, Clock: clock, Log: zerolog.Nop(), Metrics: prometheus.NewRegistry(), Digest: d})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, l := range loops {
				found = found || l.Name() == LoopDigest
			}
			if found != tc.want || (d != nil) != tc.want {
				t.Fatalf("digest %v, loop %v; want %v", d != nil, found, tc.want)
			}
		})
	}
}
