package cost_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// epoch is the tests' start: the middle of a month, on a quarter hour.
var epoch = time.Date(2026, 7, 10, 12, 0, 0, 0, time.UTC)

// env is one test's world: a database, the DigitalOcean test server with
// a read-only and a full-access token, and a Reconciler holding a client
// for the read token only.
type env struct {
	t     testing.TB
	db    *storage.DB
	do    *dofake.Server
	clock *clockwork.FakeClock
	rec   *cost.Reconciler
	// platform is the read-token client rec holds.
	platform digitalocean.API
}

func newEnv(t testing.TB, opts ...dofake.Option) *env {
	t.Helper()
	clock := clockwork.NewFakeClockAt(epoch)
	s := dofake.New(t, append([]dofake.Option{dofake.WithClock(clock)}, opts...)...)
	read := s.AddToken("read", dofake.ReadOnly...)
	// The write token exists at the provider; the reconciler is never
	// given it, and the request log proves it is never sent.
	s.AddToken("write", dofake.FullAccess...)
	c, err := digitalocean.New(digitalocean.Config{BaseURL: s.URL, Token: digitalocean.Token(read), Label: "read", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	db := storagetest.NewDB(t)
	rec, err := cost.New(cost.Config{DB: db, Platform: c, Clock: clock, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, db: db, do: s, clock: clock, rec: rec, platform: c}
}

func (e *env) reconcile() cost.Report {
	e.t.Helper()
	rep, err := e.rec.Reconcile(context.Background(), storage.CostTriggerAdmin)
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	return rep
}

// deployment reads one deployment's cost view.
func (e *env) deployment(envID int64, id string) storage.CostDeployment {
	e.t.Helper()
	deps, err := storage.CostDeploymentsInRange(context.Background(), e.db.Read, time.Time{}, epoch.AddDate(10, 0, 0))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range deps {
		if d.EnvironmentID == envID && d.ID == id {
			return d
		}
	}
	e.t.Fatalf("deployment %s not found", id)
	return storage.CostDeployment{}
}

// events returns "kind/reason/deployment" of every lifecycle event.
func (e *env) events() []string {
	e.t.Helper()
	rows, err := e.db.Read.QueryContext(context.Background(),
		`SELECT kind, reason, coalesce(deployment_id, '') FROM lifecycle_events ORDER BY occurred_at, id`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k, r, d string
		if err := rows.Scan(&k, &r, &d); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, k+"/"+r+"/"+d)
	}
	return out
}

// dump is every row the worker may write, as text: a database "untouched"
// test compares two dumps.
func (e *env) dump() string {
	e.t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT environment_id, id, coalesce(droplet_id,0), status, coalesce(ended_at,0), source, coalesce(hourly_rate_usd,-1), coalesce(monthly_rate_usd,-1) FROM deployments ORDER BY 1, 2`,
		`SELECT id, kind, reason FROM lifecycle_events ORDER BY id`,
		`SELECT id, size_gib, coalesce(gone_at,0) FROM cost_volumes ORDER BY id`,
		`SELECT id, total_usd FROM cost_snapshots ORDER BY id`,
		`SELECT status FROM environments ORDER BY id`,
	} {
		rows, err := e.db.Read.QueryContext(context.Background(), q)
		if err != nil {
			e.t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				e.t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		rows.Close()
		b.WriteString("--\n")
	}
	return b.String()
}

// TestInventoryAdoptsAndEnds: a chalupa-tagged droplet of an existing
// environment that no agent reported becomes an inventory deployment with
// one event; a deployment whose droplet is gone (404) is ended through
// storage.EndDeployment with one event, reason provider; a droplet an
// agent reported that merely lacks the tags is left alone; droplets
// without both tags of an existing environment are never adopted. A second
// and third pass change nothing.
func TestInventoryAdoptsAndEnds(t *testing.T) {
	e := newEnv(t)
	demo := storagetest.Environment(t, e.db, storage.Environment{Slug: "demo"})
	stray := e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo"), Size: "s-2vcpu-4gb", CreatedAt: epoch.Add(-2 * time.Hour)})
	e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("unknown-env")})                   // no such environment
	e.do.AddDroplet(dofake.Droplet{Tags: []string{"chalupa:env:demo"}})                    // no "chalupa" tag
	e.do.AddDroplet(dofake.Droplet{Tags: append(dofake.EnvTags("demo"), "chalupa:env:x")}) // fine: x is no environment
	untagged := e.do.AddDroplet(dofake.Droplet{Tags: dofake.NoTags})
	doomed := e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo")})
	storagetest.Deployment(t, e.db, storage.Deployment{EnvironmentID: demo.ID, ID: "agent-untagged", DropletID: int64(untagged.ID), LaunchedAt: epoch.Add(-time.Hour)})
	storagetest.Deployment(t, e.db, storage.Deployment{EnvironmentID: demo.ID, ID: "agent-doomed", DropletID: int64(doomed.ID), LaunchedAt: epoch.Add(-time.Hour)})

	rep := e.reconcile()
	if rep.Adopted != 2 || rep.Ended != 0 {
		t.Fatalf("first pass adopted %d, ended %d; want 2, 0", rep.Adopted, rep.Ended)
	}
	d := e.deployment(demo.ID, cost.AdoptedID(int64(stray.ID)))
	if d.Source != storage.SourceInventory || d.Status != storage.DeploymentActive || d.HourlyUSD != 0.03571 || d.MonthlyUSD != 24 ||
		!d.LaunchedAt.Equal(stray.CreatedAt) {
		t.Fatalf("adopted deployment = %+v", d)
	}
	if u := e.deployment(demo.ID, "agent-untagged"); u.Status != storage.DeploymentActive || !u.Priced {
		t.Fatalf("an agent's untagged droplet that exists must stay active (and be priced): %+v", u)
	}

	e.do.RemoveDroplet(doomed.ID)
	e.clock.Advance(cost.Interval)
	rep = e.reconcile()
	if rep.Adopted != 0 || rep.Ended != 1 {
		t.Fatalf("second pass adopted %d, ended %d; want 0, 1", rep.Adopted, rep.Ended)
	}
	if g := e.deployment(demo.ID, "agent-doomed"); g.Status != storage.DeploymentEnded || !g.EndedAt.Equal(e.clock.Now()) {
		t.Fatalf("gone droplet's deployment = %+v", g)
	}
	e.clock.Advance(cost.Interval)
	if rep = e.reconcile(); rep.Adopted != 0 || rep.Ended != 0 {
		t.Fatalf("third pass adopted %d, ended %d; want nothing", rep.Adopted, rep.Ended)
	}
	got := e.events()
	want := map[string]int{
		"inventory-adopted//" + cost.AdoptedID(int64(stray.ID)): 1,
		"inventory-ended/provider/agent-doomed":                 1,
	}
	adopted := 0
	for _, ev := range got {
		if strings.HasPrefix(ev, "inventory-adopted") {
			adopted++
		}
		if n, ok := want[ev]; ok {
			want[ev] = n - 1
		}
	}
	for ev, n := range want {
		if n != 0 {
			t.Errorf("event %s: %d missing or extra (events %v)", ev, n, got)
		}
	}
	if adopted != 2 {
		t.Errorf("%d adoption events, want 2 (one per adopted droplet): %v", adopted, got)
	}
	if n, _ := storage.CountCostSnapshots(context.Background(), e.db.Read); n != 3 {
		t.Errorf("%d snapshots after three passes, want 3", n)
	}
}

// TestReadTokenOnly: every request a pass sends carries the read token;
// the write token, which exists at the provider, is never sent.
func TestReadTokenOnly(t *testing.T) {
	e := newEnv(t)
	demo := storagetest.Environment(t, e.db, storage.Environment{Slug: "demo"})
	e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo")})
	gone := e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo")})
	e.do.AddVolume(dofake.Volume{Tags: dofake.EnvTags("demo")})
	storagetest.Deployment(t, e.db, storage.Deployment{EnvironmentID: demo.ID, DropletID: int64(gone.ID)})
	storagetest.Deployment(t, e.db, storage.Deployment{EnvironmentID: demo.ID, Size: "s-4vcpu-8gb"}) // priced from the catalogue
	e.do.RemoveDroplet(gone.ID)
	e.reconcile()

	all := e.do.Requests()
	if len(all) == 0 {
		t.Fatal("no provider request at all")
	}
	routes := map[dofake.Route]bool{}
	for _, r := range all {
		routes[r.Route] = true
		if r.Token != "read" {
			t.Errorf("request %s sent with token %q, want read only", r, r.Token)
		}
	}
	for _, want := range []dofake.Route{dofake.RouteListDroplets, dofake.RouteGetDroplet, dofake.RouteListVolumes, dofake.RouteListSizes} {
		if !routes[want] {
			t.Errorf("no %s request: the test does not exercise every call (saw %v)", want, routes)
		}
	}
	if d := e.do.Deletes(); len(d) != 0 {
		t.Errorf("reconciliation sent deletes: %v", d)
	}
}

// TestProviderFailureWritesNothing: a 401, 403, 429 or 500 on any of the
// calls a pass makes returns an error naming it and leaves every table the
// worker writes exactly as it was — no adoption, ending, rate, volume or
// snapshot — although the pass had each kind of work to do.
func TestProviderFailureWritesNothing(t *testing.T) {
	for _, route := range []dofake.Route{dofake.RouteListDroplets, dofake.RouteListVolumes, dofake.RouteGetDroplet, dofake.RouteListSizes} {
		for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusInternalServerError} {
			t.Run(fmt.Sprintf("%s %d", route, status), func(t *testing.T) {
				e := newEnv(t)
				demo := storagetest.Environment(t, e.db, storage.Environment{Slug: "demo"})
				e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo")})
				gone := e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo")})
				e.do.AddVolume(dofake.Volume{Tags: dofake.EnvTags("demo")})
				storagetest.Deployment(t, e.db, storage.Deployment{EnvironmentID: demo.ID, DropletID: int64(gone.ID)})
				storagetest.Deployment(t, e.db, storage.Deployment{EnvironmentID: demo.ID, Size: "s-4vcpu-8gb"})
				e.do.RemoveDroplet(gone.ID)
				before := e.dump()
				e.do.Inject(dofake.Fault{Route: route, Status: status})
				rep, err := e.rec.Reconcile(context.Background(), storage.CostTriggerAdmin)
				if err == nil {
					t.Fatalf("pass succeeded despite %d on %s: %+v", status, route, rep)
				}
				if !strings.Contains(err.Error(), fmt.Sprint(status)) {
					t.Errorf("error %q does not name the status", err)
				}
				if after := e.dump(); after != before {
					t.Fatalf("the database changed:\nbefore\n%s\nafter\n%s", before, after)
				}
				if rep.SnapshotID != 0 {
					t.Errorf("failed pass reports snapshot %d", rep.SnapshotID)
				}
			})
		}
	}
}

// TestCostArithmetic runs passes over a small fleet and checks the
// month-to-date estimate against hand-computed values: the launch-time
// rate survives a price change, an adopted droplet is billed from its
// creation, a sunk (ended) cycle stays in the month, storage keeps
// accruing after compute ended, and the next month starts from zero.
func TestCostArithmetic(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	demo := storagetest.Environment(t, e.db, storage.Environment{Slug: "demo"})
	idle := storagetest.Environment(t, e.db, storage.Environment{Slug: "idle"})

	// An agent deployment on s-2vcpu-4gb (0.03571/h), launched now.
	agentDrop := e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo"), Size: "s-2vcpu-4gb", CreatedAt: epoch})
	storagetest.Deployment(t, e.db, storage.Deployment{EnvironmentID: demo.ID, ID: "agent", DropletID: int64(agentDrop.ID), Size: "s-2vcpu-4gb", LaunchedAt: epoch})
	// A stray GPU droplet created an hour ago (3.39/h): adopted.
	gpu := e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo"), Size: "gpu-h100x1-80gb", CreatedAt: epoch.Add(-time.Hour)})
	// A 100 GiB volume of the idle environment, created now; and a short
	// cycle there that already ended (20 s of s-1vcpu-1gb: the $0.01
	// minimum).
	e.do.AddVolume(dofake.Volume{Tags: dofake.EnvTags("idle"), SizeGiB: 100, CreatedAt: epoch})
	storagetest.Deployment(t, e.db, storage.Deployment{EnvironmentID: idle.ID, ID: "short", Size: "s-1vcpu-1gb", LaunchedAt: epoch,
		Status: storage.DeploymentEnded, EndedAt: epoch.Add(20 * time.Second)})

	e.reconcile()
	// The price of s-2vcpu-4gb doubles: the running deployment keeps the
	// rate captured at first observation.
	e.do.SetSize(dofake.Size{Slug: "s-2vcpu-4gb", VCPUs: 2, MemoryMiB: 4096, DiskGiB: 80, PriceHourly: 0.07142, PriceMonthly: 48})
	e.clock.Advance(10 * time.Hour)
	rep := e.reconcile()

	const volRate = cost.DefaultVolumeUSDPerGiBMonth
	wantDemo := 10*0.03571 + 11*3.39
	wantIdle := 0.01 + 100*volRate*10/672
	check := func(est cost.Estimate, wantDemo, wantIdle float64) {
		t.Helper()
		got := map[string]float64{}
		for _, x := range est.Environments {
			got[x.Slug] = x.TotalUSD()
		}
		if !near(got["demo"], wantDemo) || !near(got["idle"], wantIdle) || !near(est.TotalUSD(), wantDemo+wantIdle) {
			t.Fatalf("estimate %s at %s: demo %.6f (want %.6f), idle %.6f (want %.6f), total %.6f",
				est.Month, est.At, got["demo"], wantDemo, got["idle"], wantIdle, est.TotalUSD())
		}
	}
	check(rep.Estimate, wantDemo, wantIdle)
	if a := e.deployment(demo.ID, "agent"); a.HourlyUSD != 0.03571 || a.MonthlyUSD != 24 {
		t.Fatalf("the captured rate was rewritten after a price change: %+v", a)
	}
	if g := e.deployment(demo.ID, cost.AdoptedID(int64(gpu.ID))); !g.BillingStart().Equal(gpu.CreatedAt) {
		t.Fatalf("adopted droplet billed from %v, want its creation %v", g.BillingStart(), gpu.CreatedAt)
	}
	snap, err := storage.LatestCostSnapshot(ctx, e.db.Read)
	if err != nil || snap.ID != rep.SnapshotID || !near(snap.TotalUSD, wantDemo+wantIdle) || len(snap.Environments) != 2 || snap.Month != "2026-07" {
		t.Fatalf("snapshot %+v, %v", snap, err)
	}

	// Compute of demo ends (both droplets destroyed); a day later only the
	// idle environment's storage has grown.
	e.do.RemoveDroplet(agentDrop.ID)
	e.do.RemoveDroplet(gpu.ID)
	rep = e.reconcile()
	if rep.Ended != 2 {
		t.Fatalf("ended %d, want 2", rep.Ended)
	}
	e.clock.Advance(24 * time.Hour)
	rep = e.reconcile()
	check(rep.Estimate, wantDemo, 0.01+100*volRate*34/672)

	// The next month: the ended cycles are July's; August has storage
	// only, from its first instant.
	aug := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	est, err := cost.EstimateMonth(ctx, e.db.Read, cost.DefaultRule, aug, aug.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !near(est.ComputeUSD, 0) || !near(est.StorageUSD, 100*volRate*48/672) {
		t.Fatalf("August: compute %.6f storage %.6f", est.ComputeUSD, est.StorageUSD)
	}
	// July as a whole, read in August: storage capped at the month.
	est, err = cost.EstimateMonth(ctx, e.db.Read, cost.DefaultRule, epoch, aug.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	julyStorage := 100 * volRate * (aug.Sub(epoch).Hours()) / 672
	if julyStorage > 10 {
		julyStorage = 10
	}
	if !near(est.StorageUSD, julyStorage) || !near(est.ComputeUSD, 10*0.03571+11*3.39+0.01) {
		t.Fatalf("July read in August: compute %.6f storage %.6f (want %.6f)", est.ComputeUSD, est.StorageUSD, julyStorage)
	}
}

// TestVolumeGone: a volume a complete listing no longer holds is marked
// gone and stops accruing.
func TestVolumeGone(t *testing.T) {
	e := newEnv(t)
	storagetest.Environment(t, e.db, storage.Environment{Slug: "demo"})
	v := e.do.AddVolume(dofake.Volume{Tags: dofake.EnvTags("demo"), SizeGiB: 672, CreatedAt: epoch})
	e.reconcile()
	e.clock.Advance(time.Hour)
	rep := e.reconcile()
	if !near(rep.Estimate.StorageUSD, 672*0.10/672) {
		t.Fatalf("storage after 1 h = %.6f, want 0.10", rep.Estimate.StorageUSD)
	}
	e.do.RemoveVolume(v.ID)
	e.reconcile()
	e.clock.Advance(5 * time.Hour)
	if rep = e.reconcile(); !near(rep.Estimate.StorageUSD, 0.10) {
		t.Fatalf("storage after the volume went = %.6f, want it frozen at 0.10", rep.Estimate.StorageUSD)
	}
}

// TestAccountsHoldTheirOwnDeployments: each provider account's pass looks
// only at the deployments whose droplets live in it. A customer
// organization's managed deployment runs in the platform's account: the
// customer's pass must not look it up (its token would answer 404 and end
// a live deployment); the platform's pass keeps it. A customer's own
// deployment whose droplet is gone from the customer's account ends.
func TestAccountsHoldTheirOwnDeployments(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	custAPI := dofake.New(t, dofake.WithClock(e.clock))
	custToken := custAPI.AddToken("customer:acme", dofake.CustomerScopes...)
	custClient, err := digitalocean.New(digitalocean.Config{BaseURL: custAPI.URL, Token: digitalocean.Token(custToken), Label: "customer:acme", Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	var org storage.Organization
	if err := e.db.Writer.Do(ctx, func(tx storage.Tx) error {
		org, err = storage.CreateOrganization(ctx, tx, "acme", "Acme", epoch)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var acme storage.Environment
	if err := e.db.Writer.Do(ctx, func(tx storage.Tx) error {
		acme, err = storage.CreateEnvironmentInOrg(ctx, tx, org.ID, "acme-gpu", "", epoch)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rec, err := cost.New(cost.Config{DB: e.db, Platform: e.platform, Clock: e.clock, Log: zerolog.Nop(),
		Customers: func(context.Context) ([]cost.Account, error) {
			return []cost.Account{{OrgID: org.ID, Droplets: custClient}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	// managed-1 runs in the platform's account; cust-1 in the customer's,
	// whose droplet is then deleted there.
	platformDroplet := e.do.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("acme-gpu")})
	custDroplet := custAPI.AddDroplet(dofake.Droplet{ID: 510000001, Tags: dofake.EnvTags("acme-gpu")}) // ids distinct from the platform account's
	if err := e.db.Writer.Do(ctx, func(tx storage.Tx) error {
		if _, err := storage.ApplyLaunch(ctx, tx, storage.Launch{EnvironmentID: acme.ID, DeploymentID: "managed-1", DropletID: int64(platformDroplet.ID),
			Managed: true, At: epoch.Add(-time.Hour), LimitMinutes: 30}, 0); err != nil {
			return err
		}
		_, err := storage.ApplyLaunch(ctx, tx, storage.Launch{EnvironmentID: acme.ID, DeploymentID: "cust-1", DropletID: int64(custDroplet.ID),
			At: epoch.Add(-time.Hour), LimitMinutes: 30}, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	custAPI.RemoveDroplet(custDroplet.ID)

	rep, err := rec.Reconcile(ctx, storage.CostTriggerAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ended != 1 {
		t.Errorf("ended %d deployments, want 1 (cust-1 only)", rep.Ended)
	}
	if d := e.deployment(acme.ID, "managed-1"); d.Status != storage.DeploymentActive {
		t.Errorf("the managed deployment in the platform's account: %+v, want active", d)
	}
	if d := e.deployment(acme.ID, "cust-1"); d.Status != storage.DeploymentEnded {
		t.Errorf("the customer's deployment whose droplet is gone: %+v, want ended", d)
	}
	for _, req := range custAPI.Requests() {
		if strings.Contains(req.Path, strconv.Itoa(platformDroplet.ID)) {
			t.Errorf("the customer's token was sent for the platform's droplet: %s", req)
		}
	}
}
