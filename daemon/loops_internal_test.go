package daemon

import (
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest/telemetry"
)

// The registry names every loop once and registers each loop's series on the
// registry it is given.
func TestRegisteredLoops(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := LoopDeps{Clock: clockwork.NewFakeClock(), Log: zerolog.Nop(), Metrics: reg}
	loops, err := registeredLoops(d)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, l := range loops {
		if l.Name() == "" || names[l.Name()] {
			t.Errorf("loop name %q is empty or repeated", l.Name())
		}
		names[l.Name()] = true
	}
	if !names["nonce-prune"] {
		t.Errorf("loops %v lack nonce-prune", names)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, want := range []string{"chalupa_nonces_pruned_total", "chalupa_nonce_prune_ticks_total"} {
		if !got[want] {
			t.Errorf("registry lacks %s (has %v)", want, got)
		}
	}
	if _, err := registeredLoops(d); err == nil {
		t.Error("registering the loops twice on one registry succeeded")
	}

	// The retention loop is the worker it is given (the admin API's), so
	// adminRunRetention and the loop share one pass at a time.
	shared := &telemetry.Retention{Clock: d.Clock, Log: d.Log}
	d.Metrics, d.Retention = prometheus.NewRegistry(), shared
	loops, err = registeredLoops(d)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range loops {
		found = found || l == Loop(shared)
	}
	if !found || shared.Metrics == nil {
		t.Errorf("loops %v do not run the given retention worker with metrics", loops)
	}
}
