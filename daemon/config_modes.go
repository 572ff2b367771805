package daemon

import (
	"fmt"
	"strings"
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

// The cost reconciler's switch (CHALUPA_COSTS).
const (
	// CostsOn runs cost reconciliation with DIGITALOCEAN_READ_TOKEN.
	CostsOn = "on"
	// CostsOff runs none: no inventory, no cost estimates.
	CostsOff = "off"
)

// upgradeHint ends every refusal the explicit-mode rules add: an upgrade
// from a release that accepted the same environment is announced by
// `config check` run with the new binary before restarting
// (docs/operations.md, "Configuration").
const upgradeHint = "(checked since the release that added CHALUPA_REAPER and CHALUPA_COSTS: run `chalupa config check` with a new binary before restarting on it)"

// checkModes reads CHALUPA_REAPER (and the deprecated
// CHALUPA_REAPER_DRY_RUN), CHALUPA_COSTS and the requirements they put on
// the DigitalOcean tokens and DO_VOLUME_USD_PER_GIB_MONTH. On a loopback
// listener (loopback true) an unset mode follows its token, as the
// embedded default always did; off loopback an unset mode is the one
// that needs the token, so a missing token is refused rather than
// leaving the reaper or costs off in silence (docs/operations.md,
// "Configuration"). Every problem names variables, never values, and says
// the fix.
func (c *Config) checkModes(get func(string) string, bad func(string, ...any), loopback bool) {
	write, read := c.writeToken() != "", c.DOReadToken != ""

	mode := strings.ToLower(get("CHALUPA_REAPER"))
	switch mode {
	case "", ReaperModeLive, ReaperModeDryRun, ReaperModeOff:
	default:
		bad("CHALUPA_REAPER must be live, dry-run or off")
		mode = ""
	}
	legacy := ""
	switch v := strings.ToLower(get("CHALUPA_REAPER_DRY_RUN")); v {
	case "":
	case "false", "0":
		legacy = ReaperModeLive
	case "true", "1":
		legacy = ReaperModeDryRun
	default:
		bad("CHALUPA_REAPER_DRY_RUN must be true or false (it is deprecated: set CHALUPA_REAPER=live, dry-run or off instead)")
	}
	if legacy != "" {
		if mode != "" && mode != legacy {
			bad("CHALUPA_REAPER and the deprecated CHALUPA_REAPER_DRY_RUN disagree: remove CHALUPA_REAPER_DRY_RUN and keep CHALUPA_REAPER")
		} else {
			c.Warnings = append(c.Warnings, fmt.Sprintf("CHALUPA_REAPER_DRY_RUN is deprecated and read for one more release only: replace it with CHALUPA_REAPER=%s", legacy))
			mode = legacy
		}
	}
	switch {
	case mode == "" && (loopback || write):
		mode = ReaperModeOff
		if write {
			mode = ReaperModeLive
		}
	case mode == "":
		bad("DIGITALOCEAN_WRITE_TOKEN is required when CHALUPA_LISTEN is not a loopback address and CHALUPA_REAPER is unset (live): set the token, or CHALUPA_REAPER=off to run without the reaper %s", upgradeHint)
	case mode != ReaperModeOff && !write:
		bad("DIGITALOCEAN_WRITE_TOKEN is required for CHALUPA_REAPER=%s: set the token, or CHALUPA_REAPER=off to run without the reaper %s", mode, upgradeHint)
	}
	c.ReaperMode, c.ReaperDryRun = mode, mode == ReaperModeDryRun

	costs := strings.ToLower(get("CHALUPA_COSTS"))
	switch costs {
	case "", CostsOn, CostsOff:
	default:
		bad("CHALUPA_COSTS must be on or off")
		return
	}
	switch {
	case costs == "" && (loopback || read):
		c.Costs = read
	case costs == "":
		bad("DIGITALOCEAN_READ_TOKEN is required when CHALUPA_LISTEN is not a loopback address and CHALUPA_COSTS is unset (on): set the token, or CHALUPA_COSTS=off to run without inventory and cost estimates %s", upgradeHint)
	case costs == CostsOn && !read:
		bad("DIGITALOCEAN_READ_TOKEN is required for CHALUPA_COSTS=on: set the token, or CHALUPA_COSTS=off %s", upgradeHint)
	default:
		c.Costs = costs == CostsOn
	}
	if c.Costs && !loopback && get("DO_VOLUME_USD_PER_GIB_MONTH") == "" {
		// The rate is reviewed against the provider's, never assumed
		// (docs/operations.md, "Cost reconciliation").
		bad("DO_VOLUME_USD_PER_GIB_MONTH is required when costs are on and CHALUPA_LISTEN is not a loopback address: set DigitalOcean's current volume rate in USD per GiB-month, or CHALUPA_COSTS=off %s", upgradeHint)
	}
}

// onOff is CostsOn or CostsOff.
func onOff(b bool) string {
	if b {
		return CostsOn
	}
	return CostsOff
}

// ModeNotes are what `config check`, serve's log and `admin status` say
// every time the reaper or costs are not fully on (none when the reaper is
// live and costs on: docs/operations.md, "Configuration").
func (c *Config) ModeNotes() []string {
	return modeNotes(c.ReaperMode, c.Costs)
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
