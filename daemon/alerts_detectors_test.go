package daemon_test

import (
	"context"
	"testing"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/storage"
)

// TestFleetDetectorChecks: the daemon registers the fleet detectors'
// re-checks with its alerter, so at start an alert an earlier process left
// open resolves when its condition no longer holds — a failed job or
// upgrade of a box that is gone, an offline worker with nothing queued, a
// mass due in an environment with nothing due — while quota-exceeded is
// adopted and stays open for its quiet (docs/operations.md, "Alerts",
// under Detectors).
func TestFleetDetectorChecks(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	ctx := context.Background()
	set := daemon.Alerter(p.App.Server)
	open := []struct {
		kind    string
		subject alerts.Subject
	}{
		{alerts.KindJobFailed, alerts.Subject{Kind: alerts.SubjectBox, ID: "gone"}},
		{alerts.KindAgentUpgradeFailed, alerts.Subject{Kind: alerts.SubjectBox, ID: "gone"}},
		{alerts.KindWorkerOffline, alerts.Subject{Kind: alerts.SubjectPlatform}},
		{alerts.KindMassDue, alerts.Subject{Kind: alerts.SubjectEnvironment, ID: "harbor"}},
		{alerts.KindQuotaExceeded, alerts.Subject{Kind: alerts.SubjectEnvironment, ID: "harbor"}},
	}
	for _, o := range open {
		if err := set.Set(ctx, o.kind, o.subject, true, "left open by an earlier process"); err != nil {
			t.Fatalf("Set %s: %v", o.kind, err)
		}
	}
	n, err := set.(*alerter.Alerter).Recheck(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left, err := storage.OpenAlerts(ctx, p.App.DB.Read)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 || len(left) != 1 || left[0].Kind != alerts.KindQuotaExceeded {
		t.Fatalf("the re-check resolved %d and left %+v open, want 4 resolved and quota-exceeded open", n, left)
	}
}
