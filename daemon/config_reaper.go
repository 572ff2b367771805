package daemon

import (
	"fmt"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// The reaper's modes (CHALUPA_REAPER; docs/operations.md, "Configuration"
// and "Reaper").
const (
	// ReaperModeLive destroys idle and expired deployments' droplets with
	// DIGITALOCEAN_WRITE_TOKEN.
	ReaperModeLive = "live"
	// ReaperModeDryRun runs the guard with DIGITALOCEAN_WRITE_TOKEN (reads
	// only), records reaper-would-destroy events and destroys nothing.
	ReaperModeDryRun = "dry-run"
	// ReaperModeOff runs no reaper: nothing is destroyed, whatever is due.
	ReaperModeOff = "off"
)

// ReaperModes lists the reaper's modes, in the order /metrics shows them.
var ReaperModes = []string{ReaperModeLive, ReaperModeDryRun, ReaperModeOff}

// upgradeHint ends every refusal the explicit-mode rules add: an upgrade
// from a release that accepted the same environment is announced by
// `config check` run with the new binary before restarting
// (docs/operations.md, "Configuration").
const upgradeHint = "(checked since the release that added CHALUPA_REAPER and CHALUPA_COSTS: run `chalupa config check` with a new binary before restarting on it)"

// reaperOffMessage is what the log and a refused reaper tick say when
// CHALUPA_REAPER is off or, on loopback, DIGITALOCEAN_WRITE_TOKEN is not set
// (docs/operations.md, "Reaper"); the variables are named only here.
const reaperOffMessage = "the reaper is off (CHALUPA_REAPER=off, or DIGITALOCEAN_WRITE_TOKEN is not set): the reaper does not run"

// ReaperConfig is the reaper's mode and pace (docs/operations.md, "Reaper").
type ReaperConfig struct {
	// Mode is the effective reaper mode, ReaperModeLive, ReaperModeDryRun or
	// ReaperModeOff (CHALUPA_REAPER; unset on a loopback listener it is live
	// with DIGITALOCEAN_WRITE_TOKEN and off without: docs/operations.md,
	// "Configuration").
	Mode string
	// DryRun is Mode == ReaperModeDryRun: the reaper records
	// reaper-would-destroy events and destroys nothing.
	DryRun bool
	// CIFreshness is how long a heartbeat's CI report counts as live
	// (reaper.DefaultCIFreshness unless set).
	CIFreshness time.Duration
	// MaxDestroy is the destroy pace: at most this many DELETEs a
	// minute, so per tick (reaper.DefaultMaxDestroy unless set).
	MaxDestroy int
	// writeToken is DIGITALOCEAN_WRITE_TOKEN, the only platform write
	// credential. It is unexported so that only this package, where the
	// daemon is wired together, can read it; the wiring hands it to the
	// reaper alone (docs/operations.md, "Configuration"). Nothing else, not
	// even the HTTP handlers, holds it. A pointer, because fmt prints an
	// unexported field's value without calling Secret.String, but prints a
	// nested pointer as its address: %+v of a Config shows no token.
	writeToken *Secret
	// requested is CHALUPA_REAPER as given, lower-cased ("" when unset or
	// refused); legacy is what the deprecated CHALUPA_REAPER_DRY_RUN asks
	// for (ReaperModeLive, ReaperModeDryRun or "").
	requested, legacy string
	// invalid is set when CHALUPA_REAPER was refused: the mode is then
	// unknown, not unset, and nothing is resolved from it.
	invalid bool
}

// token is DIGITALOCEAN_WRITE_TOKEN ("" when unset), for the wiring that
// hands it to the reaper.
func (r *ReaperConfig) token() Secret { return deref(r.writeToken) }

// loadMode reads CHALUPA_REAPER; validateReaper resolves it.
func (r *ReaperConfig) loadMode(l *loader, v string) {
	r.requested = strings.ToLower(v)
	switch r.requested {
	case "", ReaperModeLive, ReaperModeDryRun, ReaperModeOff:
	default:
		l.bad("CHALUPA_REAPER must be live, dry-run or off")
		r.requested, r.invalid = "", true
	}
}

// loadLegacy reads the deprecated CHALUPA_REAPER_DRY_RUN.
func (r *ReaperConfig) loadLegacy(l *loader, v string) {
	switch strings.ToLower(v) {
	case "":
	case "false", "0":
		r.legacy = ReaperModeLive
	case "true", "1":
		r.legacy = ReaperModeDryRun
	default:
		l.bad("CHALUPA_REAPER_DRY_RUN must be true or false (it is deprecated: set CHALUPA_REAPER=live, dry-run or off instead)")
	}
}

// validateReaper keeps the write token apart from the read token and
// resolves the mode. On a loopback listener an unset mode follows the
// token, as the embedded default always did; off loopback an unset mode is
// live, so a missing token is refused rather than leaving the reaper off
// in silence (docs/operations.md, "Configuration"). Every problem names
// variables, never values, and says the fix.
func (c *Config) validateReaper(l *loader) {
	r := &c.Reaper
	write := r.token()
	if write != "" && write == c.Costs.ReadToken {
		// The write token is dedicated to the reaper and never shared
		// with the read token (docs/operations.md, "Configuration").
		l.bad("DIGITALOCEAN_WRITE_TOKEN must differ from DIGITALOCEAN_READ_TOKEN")
	}
	if r.invalid {
		// Already refused by name: the token rules below depend on a
		// mode the operator has not given, and reading it as unset (or
		// as the deprecated variable's) would say what is not so.
		return
	}
	mode := r.requested
	if r.legacy != "" {
		if mode != "" && mode != r.legacy {
			l.bad("CHALUPA_REAPER and the deprecated CHALUPA_REAPER_DRY_RUN disagree: remove CHALUPA_REAPER_DRY_RUN and keep CHALUPA_REAPER")
		} else {
			c.Warnings = append(c.Warnings, fmt.Sprintf("CHALUPA_REAPER_DRY_RUN is deprecated and read for one more release only: replace it with CHALUPA_REAPER=%s", r.legacy))
			mode = r.legacy
		}
	}
	loopback := l.loopback || !l.listenOK
	switch {
	case mode == "" && (loopback || write != ""):
		mode = ReaperModeOff
		if write != "" {
			mode = ReaperModeLive
		}
	case mode == "":
		l.bad("DIGITALOCEAN_WRITE_TOKEN is required when CHALUPA_LISTEN is not a loopback address and CHALUPA_REAPER is unset (live): set the token, or CHALUPA_REAPER=off to run without the reaper %s", upgradeHint)
	case mode != ReaperModeOff && write == "":
		l.bad("DIGITALOCEAN_WRITE_TOKEN is required for CHALUPA_REAPER=%s: set the token, or CHALUPA_REAPER=off to run without the reaper %s", mode, upgradeHint)
	}
	r.Mode, r.DryRun = mode, mode == ReaperModeDryRun
}

// ModeNotes are what `config check`, serve's log and `admin status` say
// every time the reaper or costs are not fully on (none when the reaper is
// live and costs on: docs/operations.md, "Configuration").
func (c *Config) ModeNotes() []string {
	return modeNotes(c.Reaper.Mode, c.Costs.On)
}

// modeNotes is ModeNotes for a reaper mode and the cost switch.
func modeNotes(reaperMode string, costs bool) []string {
	var out []string
	switch reaperMode {
	case ReaperModeOff:
		out = append(out, "the reaper is off (CHALUPA_REAPER=off, or DIGITALOCEAN_WRITE_TOKEN unset on loopback): nothing is destroyed, whatever is due")
	case ReaperModeDryRun:
		out = append(out, "the reaper is in dry run (CHALUPA_REAPER=dry-run): it records reaper-would-destroy events and destroys nothing")
	}
	if !costs {
		out = append(out, "costs are off (CHALUPA_COSTS=off, or DIGITALOCEAN_READ_TOKEN unset on loopback): no inventory, no cost estimates")
	}
	return out
}

// newReaper builds the reaper from the configuration: the write token goes
// into its client here and nowhere else (docs/architecture.md, "Dependency
// direction"). Without the write token the reaper has no
// credentials: it is not started, and its status says so. Errors: a
// client that cannot be built, or metrics already registered.
//
// customers opens customer organizations' own tokens for the customer
// sweep (docs/operations.md, "Customer organizations").
//
// guard is the clock guard ingest feeds. The storage-fault hold
// (reaper.Config.StorageFault) reads the writer's storage health: while
// commits fail a deadline that could not move is not evidence
// (docs/operations.md, "Reaper").
func newReaper(cfg *Config, db *storage.DB, svc *ingest.Service, guard *clockguard.Guard, clock clockwork.Clock, log zerolog.Logger,
	reg prometheus.Registerer, customers *reaper.CustomerTokens, al *alerter.Alerter) (*reaper.Reaper, error) {
	m, err := reaper.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	rc := reaper.Config{DB: db, Clock: clock, Log: log, DryRun: cfg.Reaper.DryRun, CIFreshness: cfg.Reaper.CIFreshness,
		Wake: svc.DeadlineActivity(), Metrics: m, Guard: guard, MaxDestroy: cfg.Reaper.MaxDestroy,
		StorageFault: storageFault(db.Writer, clock), Alerts: al}
	if customers != nil {
		rc.Customers = customers
	}
	if tok := cfg.Reaper.token(); tok != "" && cfg.Reaper.Mode != ReaperModeOff {
		write, err := digitalocean.New(digitalocean.Config{BaseURL: cfg.DigitalOcean.APIURL, Token: digitalocean.Token(tok.Reveal()), Label: "write",
			Version: buildinfo.Version, Clock: clock, Logger: log})
		if err != nil {
			return nil, err
		}
		rc.Credentials = reaper.Platform{Write: write}
		// The reaper checks its own token (docs/operations.md, "Alerts").
		rc.TokenVariable = "DIGITALOCEAN_WRITE_TOKEN"
	}
	// Off, the reaper is not started and says nothing here: the start's
	// mode notes (ModeNotes, logged once by openServices) already said it
	// in the one wording status and the console use (docs/operations.md,
	// "Configuration").
	r := reaper.New(rc)
	// An alert open across a restart resolves at start when its condition
	// no longer holds (docs/operations.md, "Alerts").
	for kind, check := range r.AlertChecks() {
		if err := al.RegisterCheck(kind, check); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// storageFault adapts the writer's storage health to the reaper's hold. The
// writer stamps faults with the process's wall clock; the last fault's age
// (monotonic) is carried onto the reaper's clock, so the hold stays right
// whatever that clock reads.
func storageFault(w *storage.Writer, clock clockwork.Clock) func() (bool, time.Time) {
	return func() (bool, time.Time) {
		h := w.StorageHealth()
		if h.LastFaultAt.IsZero() {
			return h.Failing, time.Time{}
		}
		return h.Failing, clock.Now().Add(-time.Since(h.LastFaultAt))
	}
}
