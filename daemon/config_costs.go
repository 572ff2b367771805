package daemon

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

// The cost reconciler's switch (CHALUPA_COSTS).
const (
	// CostsOn runs cost reconciliation with DIGITALOCEAN_READ_TOKEN.
	CostsOn = "on"
	// CostsOff runs none: no inventory, no cost estimates.
	CostsOff = "off"
)

// CostsConfig is inventory and cost reconciliation (docs/operations.md,
// "Cost reconciliation").
type CostsConfig struct {
	// On is whether cost reconciliation runs (CHALUPA_COSTS; unset on a
	// loopback listener it is on with DIGITALOCEAN_READ_TOKEN and off
	// without: docs/operations.md, "Configuration").
	On bool
	// ReadToken is DIGITALOCEAN_READ_TOKEN: inventory, prices and the
	// droplet lookup of the `sunk` check, never a write.
	ReadToken Secret
	// VolumeUSDPerGiB is DO_VOLUME_USD_PER_GIB_MONTH (0 when unset: the
	// reconciler's default rate).
	VolumeUSDPerGiB float64
	// BillingRule is the droplet billing rule cost estimates apply
	// (cost.DefaultRule unless DO_BILLING_* override a part of it).
	BillingRule cost.Rule `json:"-"`
	// requested is CHALUPA_COSTS as given, lower-cased; invalid when it
	// was neither on nor off; volumeSet whether the volume price was set.
	requested          string
	invalid, volumeSet bool
}

// onOff is CostsOn or CostsOff.
func onOff(b bool) string {
	if b {
		return CostsOn
	}
	return CostsOff
}

// loadSwitch reads CHALUPA_COSTS; validateCosts resolves it.
func (k *CostsConfig) loadSwitch(l *loader, v string) {
	k.requested = strings.ToLower(v)
	switch k.requested {
	case "", CostsOn, CostsOff:
	default:
		l.bad("CHALUPA_COSTS must be on or off")
		k.invalid = true
	}
}

// loadVolume reads DO_VOLUME_USD_PER_GIB_MONTH.
func (k *CostsConfig) loadVolume(l *loader, v string) {
	k.volumeSet = v != ""
	if v == "" {
		return
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f <= 100) { // also refuses NaN
		l.bad("DO_VOLUME_USD_PER_GIB_MONTH must be a number of USD between 0 and 100")
		return
	}
	k.VolumeUSDPerGiB = f
}

// volumeText prints DO_VOLUME_USD_PER_GIB_MONTH as configured.
func (k *CostsConfig) volumeText() string {
	if k.VolumeUSDPerGiB > 0 {
		return strconv.FormatFloat(k.VolumeUSDPerGiB, 'f', -1, 64)
	}
	return "(unset)"
}

// billingVariables are the four DO_BILLING_* rows, each overriding one part
// of the rule newConfig starts from, cost.DefaultRule.
func (k *CostsConfig) billingVariables() []variable {
	r := &k.BillingRule
	secs := func(d *time.Duration) func() float64 { return func() float64 { return d.Seconds() } }
	group := "`DO_BILLING_GRANULARITY_SECONDS`, `DO_BILLING_MINIMUM_SECONDS`, `DO_BILLING_MINIMUM_CHARGE_USD`, `DO_BILLING_MONTHLY_CAP_HOURS`"
	var rows []variable
	for _, b := range []struct {
		name   string
		ptr    any
		lo, hi float64
		set    func(float64)
		get    func() float64
		help   string
	}{
		{"DO_BILLING_GRANULARITY_SECONDS", &r.Granularity, 1, 3600, func(f float64) { r.Granularity = time.Duration(f) * time.Second }, secs(&r.Granularity),
			"billing unit usage is rounded up to (seconds)"},
		{"DO_BILLING_MINIMUM_SECONDS", &r.MinimumBilled, 0, 86400, func(f float64) { r.MinimumBilled = time.Duration(f) * time.Second }, secs(&r.MinimumBilled),
			"least usage billed (seconds)"},
		{"DO_BILLING_MINIMUM_CHARGE_USD", &r.MinimumChargeUSD, 0, 100, func(f float64) { r.MinimumChargeUSD = f }, func() float64 { return r.MinimumChargeUSD },
			"least charge of a droplet (USD)"},
		{"DO_BILLING_MONTHLY_CAP_HOURS", &r.CapHours, 1, 744, func(f float64) { r.CapHours = f }, func() float64 { return r.CapHours },
			"hours after which a month is billed at the monthly price"},
	} {
		rows = append(rows, variable{name: b.name, ptr: b.ptr, help: b.help, doc: docRow{group: group},
			load: func(l *loader, v string) {
				if v == "" {
					return
				}
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || !(f >= b.lo && f <= b.hi) { // also refuses NaN
					l.bad("%s must be a number between %g and %g", b.name, b.lo, b.hi)
					return
				}
				b.set(f)
			},
			show: func() string { return strconv.FormatFloat(b.get(), 'f', -1, 64) }})
	}
	rows[0].doc = docRow{group: group, def: "unset: DigitalOcean's droplet rule since 2026-01-01 — 1 s, 60 s, $0.01, 672 h (see \"Cost reconciliation\")", refusedWhen: "not a number in 1–3600, 0–86400, 0–100, 1–744", why: "the provider may change its rule; the estimates follow without a new release"}
	return rows
}

// validateCosts resolves CHALUPA_COSTS against DIGITALOCEAN_READ_TOKEN and
// DO_VOLUME_USD_PER_GIB_MONTH. On a loopback listener an unset switch
// follows the token, as the embedded default always did; off loopback an
// unset switch is on, so a missing token is refused rather than leaving
// costs off in silence (docs/operations.md, "Configuration").
func (c *Config) validateCosts(l *loader) {
	k := &c.Costs
	if k.invalid {
		return
	}
	loopback, read := l.loopback || !l.listenOK, k.ReadToken != ""
	switch costs := k.requested; {
	case costs == "" && (loopback || read):
		k.On = read
	case costs == "":
		l.bad("DIGITALOCEAN_READ_TOKEN is required when CHALUPA_LISTEN is not a loopback address and CHALUPA_COSTS is unset (on): set the token, or CHALUPA_COSTS=off to run without inventory and cost estimates %s", upgradeHint)
	case costs == CostsOn && !read:
		l.bad("DIGITALOCEAN_READ_TOKEN is required for CHALUPA_COSTS=on: set the token, or CHALUPA_COSTS=off %s", upgradeHint)
	default:
		k.On = costs == CostsOn
	}
	if k.On && !loopback && !k.volumeSet {
		// The rate is reviewed against the provider's, never assumed
		// (docs/operations.md, "Cost reconciliation").
		l.bad("DO_VOLUME_USD_PER_GIB_MONTH is required when costs are on and CHALUPA_LISTEN is not a loopback address: set DigitalOcean's current volume rate in USD per GiB-month, or CHALUPA_COSTS=off %s", upgradeHint)
	}
}

// newReadClient builds the client for DIGITALOCEAN_READ_TOKEN (nil, nil
// while it is unset): inventory, prices, and the droplet lookup of `sunk`
// lifecycle events.
func newReadClient(cfg *Config, clock clockwork.Clock, log zerolog.Logger) (*digitalocean.Client, error) {
	if cfg.Costs.ReadToken == "" {
		return nil, nil
	}
	return digitalocean.New(digitalocean.Config{BaseURL: cfg.DigitalOcean.APIURL, Token: digitalocean.Token(cfg.Costs.ReadToken.Reveal()),
		Label: "read", Version: buildinfo.Version, Clock: clock, Logger: log})
}

// newCostReconciler builds the reconciler on the read-token client (nil,
// nil without one, or with CHALUPA_COSTS=off: docs/operations.md,
// "Configuration").
//
// customers builds each customer organization's client from its own active
// token: inventory lists, adopts and ends only that organization's
// droplets with it; prices still come from the read token.
func newCostReconciler(cfg *Config, client *digitalocean.Client, db *storage.DB, clock clockwork.Clock, log zerolog.Logger, customers *reaper.CustomerTokens) (*cost.Reconciler, error) {
	if client == nil || !cfg.Costs.On {
		return nil, nil
	}
	cc := cost.Config{DB: db, Platform: client, Clock: clock, Log: log.With().Str("loop", "cost-reconcile").Logger(),
		VolumeUSDPerGiBMonth: cfg.Costs.VolumeUSDPerGiB, Rule: cfg.Costs.BillingRule}
	if customers != nil {
		cc.Customers = func(ctx context.Context) ([]cost.Account, error) { return customerAccounts(ctx, db, customers) }
	}
	return cost.New(cc)
}

// customerAccounts is one inventory account per customer organization
// with an active provider token; an organization whose token cannot be
// opened (revoked meanwhile) is left out of this pass.
func customerAccounts(ctx context.Context, db *storage.DB, customers *reaper.CustomerTokens) ([]cost.Account, error) {
	tokens, err := storage.ListActiveProviderTokens(ctx, db.Read)
	if err != nil {
		return nil, err
	}
	var out []cost.Account
	for _, t := range tokens {
		client, _, err := customers.CustomerClient(ctx, storage.Organization{ID: t.OrgID, Slug: t.OrgSlug, Kind: storage.OrgCustomer})
		if err != nil {
			continue
		}
		out = append(out, cost.Account{OrgID: t.OrgID, Droplets: client})
	}
	return out, nil
}
