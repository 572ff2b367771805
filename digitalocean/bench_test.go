package digitalocean_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
)

// BenchmarkListDropletsByTag1000 lists a 1,000-droplet fleet (5 pages of
// 200) through godo from the test server: the provider side of a cost
// reconciliation pass.
func BenchmarkListDropletsByTag1000(b *testing.B) {
	// Budgets out of the way: the benchmark measures the listing, and
	// the fake clock moves a minute per pass so the client's own minute
	// budget never holds it back.
	clock := clockwork.NewFakeClockAt(epoch)
	s := dofake.New(b, dofake.WithRateLimits(1<<30, 1<<30))
	s.AddTokenValue("read", sentinel+"read", dofake.ReadOnly...)
	for i := 0; i < 1000; i++ {
		s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("fleet")})
	}
	c, err := digitalocean.New(digitalocean.Config{BaseURL: s.URL, Token: sentinel + "read", Label: "read", Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ds, err := c.ListDropletsByTag(ctx, digitalocean.EnvTag("fleet"))
		if err != nil || len(ds) != 1000 {
			b.Fatalf("%d droplets, %v", len(ds), err)
		}
		s.ResetRequests()
		clock.Advance(time.Minute)
	}
}
