package daemon

import (
	"context"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/pulumiexec/agentrollout"
	"github.com/chalupa-run/chalupa/storage"
)

// registerFleetChecks registers the re-checks at start of the fleet's
// detectors with the alerter (docs/operations.md, "Alerts"): the job
// lane's job-failed and worker-offline (they need no runner: a daemon
// without an executor still resolves what an earlier one left open), the
// agent upgrades' agent-upgrade-failed and ingest's quota-exceeded. The
// detectors themselves get the alerter where they are built
// (newJobLane, newRolloutManager, the quota-events loop). Errors:
// RegisterCheck's (an unknown kind: a bug).
func registerFleetChecks(w *workers, db *storage.DB, clock clockwork.Clock) error {
	checks := map[string]alerter.Check{
		alerts.KindAgentUpgradeFailed: agentrollout.AlertCheck(db),
		alerts.KindQuotaExceeded:      w.ingest.QuotaAlertCheck,
	}
	for kind, check := range jobs.AlertChecks(db, clock.Now) {
		checks[kind] = check
	}
	for kind, check := range checks {
		if err := w.alerter.RegisterCheck(kind, check); err != nil {
			return err
		}
	}
	return nil
}

// boxChanged makes the agent upgrader look at a box again after a
// converge job of it ended (jobs.RunnerConfig.AfterJob): a droplet
// destroyed or replaced ends its agent-upgrade-failed
// (docs/operations.md, "Alerts").
func (w *workers) boxChanged(ctx context.Context, box storage.Box) {
	if w.rollouts != nil {
		w.rollouts.Upgrader.BoxChanged(ctx, box)
	}
}
