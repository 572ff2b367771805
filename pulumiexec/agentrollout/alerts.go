package agentrollout

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// The upgrader is the detector of agent-upgrade-failed, about a box, of
// the alert table (docs/operations.md, "Alerts"): it holds while the box
// is upgrade-failed (an upgrade failed and the previous agent did not
// report again: the restore was silent or could not run, or chalupa
// stopped mid-upgrade) on the droplet that upgrade ran on. It is raised
// when the upgrade settles so (or Recover settles a cut one); it ends when
// a later upgrade of the box settles otherwise (upgraded, restored and
// reported, or already on the version), or when the droplet is gone or
// replaced — a converge job of the box that ends calls BoxChanged, which
// looks again. A failure whose previous agent reported again is only its
// event: the box runs, and a rollout stops at it.

// upgradeFailedHolds reports whether agent-upgrade-failed holds for b: it
// is upgrade-failed, has a droplet, and was not launched anew since.
func upgradeFailedHolds(b storage.Box) bool {
	return b.AgentUpgrade.State == storage.AgentUpgradeFailed && b.Resources.DropletID != 0 &&
		!b.Launch.LaunchedAt.After(b.AgentUpgrade.Since)
}

// upgradeFailedDetail is agent-upgrade-failed's words for b.
func upgradeFailedDetail(b storage.Box) string {
	return fmt.Sprintf("The agent upgrade of box %s to %s on droplet %d failed at %s and its previous agent did not report again (its agent-upgrade-failed event says how).",
		b.Name, b.AgentUpgrade.Version, b.Resources.DropletID, b.AgentUpgrade.Since.UTC().Format("2006-01-02T15:04:05Z"))
}

// boxAlerts remembers what was last reported per box name, so only
// changes are reported; absent is "nothing reported yet".
type boxAlerts struct {
	mu   sync.Mutex
	last map[string]bool
}

// report reports agent-upgrade-failed's state on b through s when it
// differs from what was last reported. With onlyIfHeld, a box never
// reported is reported only when it is marked upgrade-failed (BoxChanged
// looks after every job of any box, most of which never failed). A
// failed report is returned; the caller logs it.
func (a *boxAlerts) report(ctx context.Context, s alerts.Setter, b storage.Box, onlyIfHeld bool) error {
	if s == nil {
		return nil
	}
	holds, detail := upgradeFailedHolds(b), ""
	if holds {
		detail = upgradeFailedDetail(b)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = map[string]bool{}
	}
	was, known := a.last[b.Name]
	if (known && was == holds) || (!known && onlyIfHeld && !holds && b.AgentUpgrade.State != storage.AgentUpgradeFailed) {
		return nil
	}
	if err := s.Set(ctx, alerts.KindAgentUpgradeFailed, alerts.Subject{Kind: alerts.SubjectBox, ID: b.Name}, holds, detail); err != nil {
		return err
	}
	a.last[b.Name] = holds
	return nil
}

// reportBox re-reads box id and reports its condition (onlyIfHeld as for
// boxAlerts.report); a box gone ends it.
func (u *Upgrader) reportBox(ctx context.Context, id, name string, onlyIfHeld bool) {
	if u.Alerts == nil {
		return
	}
	b, err := storage.BoxByRef(ctx, u.DB.Read, id)
	if errors.Is(err, storage.ErrNotFound) {
		b = storage.Box{Name: name} // gone: the condition cannot hold
	} else if err != nil {
		u.Log.Error().Err(err).Str("box", name).Msg("reading a box for its agent-upgrade-failed alert failed")
		return
	}
	if err := u.alerted.report(ctx, u.Alerts, b, onlyIfHeld); err != nil {
		u.Log.Error().Err(err).Str("box", name).Msg("reporting agent-upgrade-failed to the alerter failed; reported again at the box's next upgrade or job")
	}
}

// BoxChanged looks at box's agent-upgrade-failed condition again after
// something other than an upgrade changed it (a converge job of the box
// ended: its droplet may be gone or replaced), and reports its end
// (docs/operations.md, "Alerts"). jobs.RunnerConfig.AfterJob calls it.
func (u *Upgrader) BoxChanged(ctx context.Context, box storage.Box) {
	u.reportBox(ctx, box.ID, box.Name, true)
}

// AlertCheck is agent-upgrade-failed's re-check, for the alerter to run at
// start on every open alert of the kind, so an alert whose end was lost in
// a crash or a restore resolves (docs/operations.md, "Alerts"): it holds
// while the box exists and upgradeFailedHolds.
func AlertCheck(db *storage.DB) func(ctx context.Context, subject alerts.Subject) (holds bool, detail string, err error) {
	return func(ctx context.Context, subject alerts.Subject) (bool, string, error) {
		b, err := storage.BoxByRef(ctx, db.Read, subject.ID)
		if errors.Is(err, storage.ErrNotFound) {
			return false, "", nil
		}
		if err != nil {
			return false, "", err
		}
		if !upgradeFailedHolds(b) {
			return false, "", nil
		}
		return true, upgradeFailedDetail(b), nil
	}
}
