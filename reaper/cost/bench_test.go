package cost_test

import (
	"context"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// BenchmarkReconcile1000 is one reconciliation pass over 1,000
// chalupa-tagged droplets in the DigitalOcean test server (docs/
// operations.md, "Cost reconciliation"): "adopt" is a first pass that
// adopts all of them (a fresh database each time), "steady" a pass over a
// fleet already known (listing, rate check, estimate, snapshot).
func BenchmarkReconcile1000(b *testing.B) {
	const fleet = 1000
	setup := func(b *testing.B) *env {
		e := newEnv(b, dofake.WithRateLimits(1<<30, 1<<30))
		storagetest.Environment(b, e.db, storage.Environment{Slug: "fleet"})
		for range fleet {
			e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("fleet")})
		}
		return e
	}
	ctx := context.Background()
	b.Run("adopt", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			e := setup(b)
			b.StartTimer()
			rep, err := e.rec.Reconcile(ctx, storage.CostTriggerAdmin)
			if err != nil || rep.Adopted != fleet {
				b.Fatalf("adopted %d, %v", rep.Adopted, err)
			}
		}
	})
	b.Run("steady", func(b *testing.B) {
		e := setup(b)
		if _, err := e.rec.Reconcile(ctx, storage.CostTriggerAdmin); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			e.clock.Advance(time.Minute) // the client's own minute budget
			rep, err := e.rec.Reconcile(ctx, storage.CostTriggerAdmin)
			if err != nil || rep.DropletsSeen != fleet || rep.Adopted != 0 {
				b.Fatalf("%+v, %v", rep, err)
			}
		}
	})
}
