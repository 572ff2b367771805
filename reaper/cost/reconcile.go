package cost

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/internal/schedule"
	"github.com/chalupa-run/chalupa/storage"
)

// Cadence and caps (docs/operations.md, "Cost reconciliation").
const (
	// Interval is the cadence: a month-to-date figure is never more than
	// a quarter hour old, for a few provider listings an hour. It is
	// aligned to the quarter hour (UTC) so that snapshots from any daemon
	// line up.
	Interval = 15 * time.Minute
	// MaxLookupsPerTick bounds the GetDroplet calls one run makes for
	// active deployments whose droplet the tag listing did not hold (an
	// untagged droplet an agent reported, or one that is gone): far under
	// the API's 250 requests a minute, so a run never spends the read
	// token's budget; the rest are looked at in the next run.
	MaxLookupsPerTick = 50
	// MaxAdoptPerTick bounds the droplets one run adopts, and
	// MaxRatesPerTick the rates it captures: a first run against a large
	// untracked fleet converges over a few runs instead of one long one.
	MaxAdoptPerTick = 2000
	MaxRatesPerTick = 5000
	// WriteBatch is the most changes one writer unit holds, so a run
	// never keeps the single writer for long (heartbeats wait behind it).
	WriteBatch = 200
)

// Lifecycle event kinds this worker records.
const (
	// EventAdopted: inventory adopted a droplet no agent reported.
	EventAdopted = "inventory-adopted"
	// EventEnded: inventory ended a deployment whose droplet is gone
	// (reason provider).
	EventEnded = "inventory-ended"
)

// Account is one provider account inventory lists: the platform
// organization with DIGITALOCEAN_READ_TOKEN, or (with customer
// organizations) a customer's own token. An account's droplets are only
// ever matched against its own organization's environments, so a
// customer's token lists, adopts and ends only that organization's
// droplets.
type Account struct {
	// OrgID is the organization the account belongs to.
	OrgID int64
	// Droplets lists and reads droplets with the account's token.
	Droplets digitalocean.DropletAPI
}

// Config is what a Reconciler is built from.
type Config struct {
	// DB is the database.
	DB *storage.DB
	// Platform is the DIGITALOCEAN_READ_TOKEN client: the platform
	// organization's droplets, every volume, and the size catalogue
	// (prices always come from it). Never the write token.
	Platform digitalocean.API
	// Customers returns the customer organizations' accounts (nil: none
	// yet; customer provider tokens come with the customer sweep).
	Customers func(ctx context.Context) ([]Account, error)
	// Clock is the daemon's clock.
	Clock clockwork.Clock
	// Log receives a line per run.
	Log zerolog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Rule is the billing rule (DefaultRule when zero).
	Rule Rule
	// VolumeUSDPerGiBMonth is DO_VOLUME_USD_PER_GIB_MONTH
	// (DefaultVolumeUSDPerGiBMonth when zero).
	VolumeUSDPerGiBMonth float64
	// AfterPass, when set, runs after each successful pass (its snapshot
	// stored), inside the pass: the budget alert evaluates the fresh
	// month-to-date figures there (docs/operations.md, "Alerts").
	AfterPass func(ctx context.Context)
}

// Reconciler is the cost reconciliation worker. Run is the scheduled
// loop; Reconcile runs one pass (the loop's tick, and the admin API's
// on-demand run). Passes never overlap.
type Reconciler struct {
	cfg Config
	mu  sync.Mutex
}

// New builds a Reconciler. Errors: no database or platform client.
func New(cfg Config) (*Reconciler, error) {
	if cfg.DB == nil || cfg.Platform == nil {
		return nil, errors.New("cost: a database and the read-token client are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Rule == (Rule{}) {
		cfg.Rule = DefaultRule
	}
	if cfg.VolumeUSDPerGiBMonth == 0 {
		cfg.VolumeUSDPerGiBMonth = DefaultVolumeUSDPerGiBMonth
	}
	return &Reconciler{cfg: cfg}, nil
}

// SetMetrics sets the series the passes update (the daemon registers them
// with its loops). Call it before Run.
func (r *Reconciler) SetMetrics(m *Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfg.Metrics = m
}

// SetAfterPass sets Config.AfterPass (the daemon wires the budget alert
// after building the alerter). Call it before Run.
func (r *Reconciler) SetAfterPass(fn func(ctx context.Context)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfg.AfterPass = fn
}

// Rule is the billing rule in use.
func (r *Reconciler) Rule() Rule { return r.cfg.Rule }

// Name implements daemon.Loop.
func (r *Reconciler) Name() string { return "cost-reconcile" }

// Run reconciles at every quarter hour (UTC) on the injected clock until
// ctx ends. A failed pass is logged; the next runs at the next quarter.
func (r *Reconciler) Run(ctx context.Context) error {
	for {
		if _, err := schedule.Wait(ctx, r.cfg.Clock, schedule.EveryAligned(Interval)); err != nil {
			return nil
		}
		if _, err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Log.Warn().Err(err).Msg("cost reconciliation failed; the database was left as it was")
		}
	}
}

// Tick is one scheduled pass: Reconcile with trigger "schedule".
func (r *Reconciler) Tick(ctx context.Context) (Report, error) {
	return r.Reconcile(ctx, storage.CostTriggerSchedule)
}

// Report is what one pass did.
type Report struct {
	// Trigger is "schedule" or "admin".
	Trigger string
	// StartedAt and Duration time the pass.
	StartedAt time.Time
	Duration  time.Duration
	// DropletsSeen and VolumesSeen count the chalupa-tagged resources
	// listed; Lookups the droplets fetched one by one.
	DropletsSeen, VolumesSeen, Lookups int
	// Adopted, Ended and RatesCaptured are what the pass wrote; Deferred
	// counts checks left for the next pass by a cap.
	Adopted, Ended, RatesCaptured, Deferred int
	// AccountErrors lists customer accounts whose provider calls failed
	// (their organizations were left untouched).
	AccountErrors []string
	// SnapshotID is the stored snapshot (0 when the pass failed).
	SnapshotID int64
	// Estimate is the month-to-date estimate after the pass.
	Estimate Estimate
}

// plan is what one account's provider reads decided, before any write.
type plan struct {
	adopt   []storage.AdoptedDroplet
	end     []storage.CostDeployment
	rates   []rateCapture
	volumes []storage.CostVolume
	envIDs  []int64
	listed  bool // the account listed volumes (platform only)
}

type rateCapture struct {
	dep             storage.CostDeployment
	hourly, monthly float64
	created         time.Time
}

// Reconcile runs one pass: every provider read first (the platform's
// droplets and volumes with the read token, the catalogue when a rate is
// needed, then each customer account's droplets), and only then the
// writes, in bounded writer units, each re-checking what it changes. A
// provider error on the platform account (401, 403, 429, 5xx, timeout)
// returns it with nothing written; a customer account's error leaves that
// organization untouched and is listed in the report. A successful pass
// stores a cost snapshot.
func (r *Reconciler) Reconcile(ctx context.Context, trigger string) (Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clock := r.cfg.Clock
	started := clock.Now().UTC()
	rep := Report{Trigger: trigger, StartedAt: started}
	fail := func(err error) (Report, error) {
		rep.Duration = clock.Since(started)
		r.cfg.Metrics.observe(rep, err)
		return rep, err
	}

	envs, err := storage.ListEnvironments(ctx, r.cfg.DB.Read)
	if err != nil {
		return fail(err)
	}
	catalogue := &sizes{api: r.cfg.Platform}

	platform, err := r.plan(ctx, Account{OrgID: storage.PlatformOrgID, Droplets: r.cfg.Platform}, envs, catalogue, &rep, started)
	if err != nil {
		return fail(err)
	}
	plans := []plan{platform}
	if r.cfg.Customers != nil {
		accounts, err := r.cfg.Customers(ctx)
		if err != nil {
			return fail(err)
		}
		for _, a := range accounts {
			p, err := r.plan(ctx, a, envs, catalogue, &rep, started)
			if err != nil {
				rep.AccountErrors = append(rep.AccountErrors, fmt.Sprintf("organization %d: %v", a.OrgID, err))
				continue
			}
			plans = append(plans, p)
		}
	}

	// Writes: nothing above wrote, so a provider failure left the
	// database as it was.
	for _, p := range plans {
		if err := r.apply(ctx, p, &rep, started); err != nil {
			return fail(err)
		}
	}
	est, err := EstimateMonth(ctx, r.cfg.DB.Read, r.cfg.Rule, started, started)
	if err != nil {
		return fail(err)
	}
	rep.Estimate = est
	rep.Duration = clock.Since(started)
	snap := storage.CostSnapshot{
		Trigger: trigger, StartedAt: started, Duration: rep.Duration, Month: est.Month,
		DropletsSeen: rep.DropletsSeen, VolumesSeen: rep.VolumesSeen, Adopted: rep.Adopted, Ended: rep.Ended,
		RatesCaptured: rep.RatesCaptured, Unpriced: est.Unpriced, TotalUSD: est.TotalUSD(),
	}
	for _, e := range est.Environments {
		snap.Environments = append(snap.Environments, storage.CostSnapshotEnvironment{
			EnvironmentID: e.EnvironmentID, ComputeUSD: e.ComputeUSD, StorageUSD: e.StorageUSD})
	}
	if err := r.cfg.DB.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		rep.SnapshotID, err = storage.InsertCostSnapshot(ctx, tx, snap)
		return err
	}); err != nil {
		return fail(err)
	}
	r.cfg.Metrics.observe(rep, nil)
	r.cfg.Log.Info().Str("trigger", trigger).Int("droplets", rep.DropletsSeen).Int("adopted", rep.Adopted).
		Int("ended", rep.Ended).Int("rates", rep.RatesCaptured).Dur("duration", rep.Duration).
		Float64("month_to_date_usd", RoundCents(est.TotalUSD())).Msg("cost reconciliation")
	if r.cfg.AfterPass != nil {
		r.cfg.AfterPass(ctx)
	}
	return rep, nil
}

// sizes is the size catalogue, fetched at most once per pass and only
// when a rate needs it.
type sizes struct {
	api    digitalocean.API
	bySlug map[string]digitalocean.Size
}

func (s *sizes) get(ctx context.Context, slug string) (digitalocean.Size, bool, error) {
	if s.bySlug == nil {
		all, err := s.api.Sizes(ctx)
		if err != nil {
			return digitalocean.Size{}, false, err
		}
		s.bySlug = make(map[string]digitalocean.Size, len(all))
		for _, z := range all {
			s.bySlug[z.Slug] = z
		}
	}
	z, ok := s.bySlug[slug]
	return z, ok, nil
}

// envTagged returns the environment of org whose tag the droplet or
// volume carries, with TagChalupa; ok is false when it carries no
// chalupa tag, none or more than one environment tag of the organization.
func envTagged(tags []string, envs map[string]storage.Environment) (storage.Environment, bool) {
	chalupa := false
	var found []storage.Environment
	for _, t := range tags {
		if t == digitalocean.TagChalupa {
			chalupa = true
		}
		if slug, ok := strings.CutPrefix(t, digitalocean.EnvTag("")); ok {
			if e, ok := envs[slug]; ok {
				found = append(found, e)
			}
		}
	}
	if !chalupa || len(found) != 1 {
		return storage.Environment{}, false
	}
	return found[0], true
}

// plan makes every provider read for one account and decides what to
// write. It writes nothing.
func (r *Reconciler) plan(ctx context.Context, a Account, envs []storage.Environment, catalogue *sizes, rep *Report, now time.Time) (plan, error) {
	var p plan
	mine := map[string]storage.Environment{}
	for _, e := range envs {
		if e.OrgID == a.OrgID {
			mine[e.Slug] = e
			p.envIDs = append(p.envIDs, e.ID)
		}
	}
	droplets, err := a.Droplets.ListDropletsByTag(ctx, digitalocean.TagChalupa)
	if err != nil {
		return plan{}, err
	}
	rep.DropletsSeen += len(droplets)
	byID := make(map[int64]digitalocean.Droplet, len(droplets))
	for _, d := range droplets {
		byID[int64(d.ID)] = d
	}
	if a.OrgID == storage.PlatformOrgID {
		vols, err := r.cfg.Platform.ListVolumesByTag(ctx, digitalocean.TagChalupa)
		if err != nil {
			return plan{}, err
		}
		p.listed = true
		for _, v := range vols {
			e, ok := envTagged(v.Tags, mine)
			if !ok {
				continue
			}
			rep.VolumesSeen++
			created := v.CreatedAt
			if created.IsZero() || created.After(now) {
				created = now
			}
			p.volumes = append(p.volumes, storage.CostVolume{ID: v.ID, EnvironmentID: e.ID, Name: v.Name, SizeGiB: v.SizeGiB,
				USDPerGiBMonth: r.cfg.VolumeUSDPerGiBMonth, CreatedAt: created, LastSeenAt: now})
		}
	}

	// Active deployments whose droplet the listing did not hold: gone
	// (404) or merely untagged; only a lookup tells.
	active, err := storage.ActiveCostDeployments(ctx, r.cfg.DB.Read, a.OrgID)
	if err != nil {
		return plan{}, err
	}
	for _, d := range active {
		if d.DropletID == 0 {
			continue
		}
		if _, ok := byID[d.DropletID]; ok {
			continue
		}
		if rep.Lookups >= MaxLookupsPerTick {
			rep.Deferred++
			continue
		}
		rep.Lookups++
		got, err := a.Droplets.GetDroplet(ctx, int(d.DropletID))
		switch {
		case errors.Is(err, digitalocean.ErrNotFound):
			p.end = append(p.end, d)
		case err != nil:
			return plan{}, err
		default:
			byID[d.DropletID] = got
		}
	}

	// Launch-time rates, captured once: from the droplet as the provider
	// reports it now, else from the catalogue by size slug.
	unpriced, err := storage.UnpricedCostDeployments(ctx, r.cfg.DB.Read, a.OrgID, MaxRatesPerTick)
	if err != nil {
		return plan{}, err
	}
	for _, d := range unpriced {
		if drop, ok := byID[d.DropletID]; ok && d.DropletID != 0 && drop.PriceHourly > 0 {
			p.rates = append(p.rates, rateCapture{dep: d, hourly: drop.PriceHourly, monthly: drop.PriceMonthly, created: drop.CreatedAt})
			continue
		}
		if d.Size == "" {
			continue
		}
		z, ok, err := catalogue.get(ctx, d.Size)
		if err != nil {
			return plan{}, err
		}
		if ok && z.PriceHourly > 0 {
			p.rates = append(p.rates, rateCapture{dep: d, hourly: z.PriceHourly, monthly: z.PriceMonthly})
		}
	}

	// Adoption: tagged droplets of this organization's environments that
	// no deployment names.
	ids := make([]int64, 0, len(droplets))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	known, err := storage.KnownDropletIDs(ctx, r.cfg.DB.Read)
	if err != nil {
		return plan{}, err
	}
	for _, id := range ids {
		d := byID[id]
		e, ok := envTagged(d.Tags, mine)
		if !ok {
			continue
		}
		if known[id] {
			continue
		}
		if len(p.adopt) >= MaxAdoptPerTick {
			rep.Deferred++
			continue
		}
		created := d.CreatedAt
		if created.IsZero() || created.After(now) {
			created = now
		}
		p.adopt = append(p.adopt, storage.AdoptedDroplet{EnvironmentID: e.ID, DeploymentID: AdoptedID(id), DropletID: id,
			Region: d.Region, Size: d.SizeSlug, CreatedAt: created, HourlyUSD: d.PriceHourly, MonthlyUSD: d.PriceMonthly, ObservedAt: now})
	}
	return p, nil
}

// inBatches applies change to items in writer units of at most WriteBatch
// items and returns how many changes took effect in the units that
// committed (a failed unit undoes its own changes only).
func inBatches[T any](ctx context.Context, w *storage.Writer, items []T, change func(storage.Tx, T) (bool, error)) (int, error) {
	total := 0
	for i := 0; i < len(items); i += WriteBatch {
		batch := items[i:min(i+WriteBatch, len(items))]
		n := 0
		if err := w.Do(ctx, func(tx storage.Tx) error {
			n = 0
			for _, it := range batch {
				ok, err := change(tx, it)
				if err != nil {
					return err
				}
				if ok {
					n++
				}
			}
			return nil
		}); err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// AdoptedID is the deployment id inventory gives an adopted droplet:
// "droplet-<id>".
func AdoptedID(dropletID int64) string { return "droplet-" + strconv.FormatInt(dropletID, 10) }

// apply writes one account's plan in writer units of at most WriteBatch
// changes; each change re-checks the state it changes inside its unit.
func (r *Reconciler) apply(ctx context.Context, p plan, rep *Report, now time.Time) error {
	w := r.cfg.DB.Writer
	n, err := inBatches(ctx, w, p.adopt, func(tx storage.Tx, a storage.AdoptedDroplet) (bool, error) {
		ok, err := storage.AdoptDroplet(ctx, tx, a)
		if err != nil || !ok {
			return false, err // !ok: an agent reported it meanwhile
		}
		_, err = storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
			ID:            fmt.Sprintf("%s:%d:%d", EventAdopted, a.EnvironmentID, a.DropletID),
			EnvironmentID: a.EnvironmentID, DeploymentID: a.DeploymentID, Kind: EventAdopted,
			Message:    fmt.Sprintf("droplet %d carries the environment's tags and no agent reported it; adopted as %s", a.DropletID, a.DeploymentID),
			OccurredAt: now,
		})
		return err == nil, err
	})
	rep.Adopted += n
	if err != nil {
		return err
	}
	n, err = inBatches(ctx, w, p.end, func(tx storage.Tx, d storage.CostDeployment) (bool, error) {
		// storage.EndDeployment is the one path that ends a deployment;
		// it ends only an active one.
		ended, err := storage.EndDeployment(ctx, tx, d.EnvironmentID, d.ID, now)
		if err != nil || !ended {
			return false, err
		}
		_, err = storage.InsertLifecycleEvent(ctx, tx, storage.LifecycleEvent{
			ID:            fmt.Sprintf("%s:%d:%s", EventEnded, d.EnvironmentID, d.ID),
			EnvironmentID: d.EnvironmentID, DeploymentID: d.ID, Kind: EventEnded, Reason: "provider",
			Message:    fmt.Sprintf("droplet %d no longer exists at DigitalOcean (404); deployment ended by inventory", d.DropletID),
			OccurredAt: now,
		})
		return err == nil, err
	})
	rep.Ended += n
	if err != nil {
		return err
	}
	n, err = inBatches(ctx, w, p.rates, func(tx storage.Tx, c rateCapture) (bool, error) {
		return storage.CaptureRate(ctx, tx, c.dep.EnvironmentID, c.dep.ID, c.hourly, c.monthly, c.created, now)
	})
	rep.RatesCaptured += n
	if err != nil {
		return err
	}
	if p.listed {
		present := make(map[string]bool, len(p.volumes))
		for _, v := range p.volumes {
			present[v.ID] = true
		}
		if err := w.Do(ctx, func(tx storage.Tx) error {
			for _, v := range p.volumes {
				if err := storage.ObserveVolume(ctx, tx, v); err != nil {
					return err
				}
			}
			_, err := storage.MarkVolumesGone(ctx, tx, p.envIDs, present, now)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}
