package daemon_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
)

// TestCostOperations drives adminReconcileCosts and adminGetCosts through
// the typed client against the DigitalOcean test server: a run adopts a
// stray droplet with the read token only and stores a snapshot; the
// estimate is labelled as such; a bad month is 400; a 500 from the
// provider is 502 provider_error and writes nothing; without a read token
// reconciliation is refused 409.
func TestCostOperations(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 7, 10, 12, 0, 0, 0, time.UTC))
	s := dofake.New(t, dofake.WithClock(clock))
	read := s.AddToken("read", dofake.ReadOnly...)
	s.AddToken("write", dofake.FullAccess...)
	d := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clock, Env: map[string]string{
		"DIGITALOCEAN_READ_TOKEN": read, "CHALUPA_DO_API_URL": s.URL}})
	if _, err := d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo"}); err != nil {
		t.Fatal(err)
	}
	drop := s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo"), Size: "gpu-h100x1-80gb", CreatedAt: clock.Now().Add(-2 * time.Hour)})

	t.Run("reconcile", func(t *testing.T) {
		r, err := d.Admin.ReconcileCosts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Snapshot.Adopted != 1 || r.Snapshot.ID == 0 || r.Note != adminapi.CostsEstimateNote {
			t.Fatalf("reconciliation = %+v", r)
		}
		for _, req := range s.Requests() {
			if req.Token != "read" {
				t.Errorf("request %s with token %s", req, req.Token)
			}
		}
	})
	t.Run("get", func(t *testing.T) {
		c, err := d.Admin.GetCosts(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if c.Month != "2026-07" || len(c.Deployments) != 1 || c.Deployments[0].DropletID != int64(drop.ID) ||
			c.Deployments[0].Source != "inventory" || c.TotalUSD < 2*3.39-1e-9 || c.TotalUSD > 2*3.39+1e-9 || c.LastReconciliation == nil ||
			!strings.Contains(c.Note, "invoice is authoritative") {
			t.Fatalf("costs = %+v", c)
		}
		june, err := d.Admin.GetCosts(ctx, "2026-06")
		if err != nil || june.TotalUSD != 0 || len(june.Deployments) != 0 {
			t.Fatalf("June = %+v, %v", june, err)
		}
	})
	t.Run("bad month", func(t *testing.T) {
		_, err := d.Admin.GetCosts(ctx, "July")
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "bad_month" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("provider error", func(t *testing.T) {
		before, _ := d.Admin.GetCosts(ctx, "")
		s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo")})
		s.Inject(dofake.Fault{Route: dofake.RouteListVolumes, Status: 500})
		_, err := d.Admin.ReconcileCosts(ctx)
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Status != 502 || ae.Code != "provider_error" || strings.Contains(ae.Message, read) {
			t.Fatalf("err = %v", err)
		}
		after, _ := d.Admin.GetCosts(ctx, "")
		if len(after.Deployments) != len(before.Deployments) || after.LastReconciliation.ID != before.LastReconciliation.ID {
			t.Fatalf("a refused run wrote: before %+v after %+v", before, after)
		}
	})
	t.Run("no read token", func(t *testing.T) {
		nd := daemontest.NewInProcess(t, daemontest.AppOptions{})
		_, err := nd.Admin.ReconcileCosts(ctx)
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Status != 409 || ae.Code != "provider_not_configured" {
			t.Fatalf("err = %v", err)
		}
	})
}
