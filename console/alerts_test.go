package console

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// TestFleetOpenAlertsAtTop: the fleet page opens with the open alerts,
// critical first, each with its kind, subject, age, acknowledged or muted
// state and the condition's first thing to do — above the summary; a
// resolved alert is not shown, and with none open there is no alerts
// section (docs/operations.md, "Alerts").
func TestFleetOpenAlertsAtTop(t *testing.T) {
	c, db := fixedConsole(t)
	_, body := pageOf(t, c.fleet, "/app")
	if strings.Contains(body, `id="alerts"`) {
		t.Fatalf("an alerts section with no alert open:\n%s", body)
	}
	ctx := context.Background()
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for _, a := range []storage.Alert{
			{ID: "01WARNOLDEST", Kind: "reaper-mass-due", SubjectKind: "environment", SubjectID: "alpha", Severity: "warning", OpenedAt: chartNow.Add(-2 * time.Hour)},
			{ID: "01CRITACKED", Kind: "reaper-overdue", SubjectKind: "platform", Severity: "critical", OpenedAt: chartNow.Add(-time.Hour), AckedAt: chartNow.Add(-time.Minute)},
			{ID: "01RESOLVED", Kind: "clock-step", SubjectKind: "platform", Severity: "critical", OpenedAt: chartNow.Add(-3 * time.Hour), ResolvedAt: chartNow.Add(-time.Hour)},
		} {
			a.LastSentAt = a.OpenedAt
			if err := storage.InsertAlert(ctx, tx, a); err != nil {
				return err
			}
		}
		return storage.MuteAlertKind(ctx, tx, "reaper-mass-due", chartNow.Add(time.Hour), chartNow)
	}); err != nil {
		t.Fatal(err)
	}
	code, body := pageOf(t, c.fleet, "/app")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	al, sum := strings.Index(body, `id="alerts"`), strings.Index(body, `id="summary"`)
	if al < 0 || sum < 0 || al > sum {
		t.Fatalf("alerts at %d, summary at %d: the open alerts are not at the top:\n%s", al, sum, body)
	}
	top := body[al:sum]
	crit, warn := strings.Index(top, `id="alert-01CRITACKED"`), strings.Index(top, `id="alert-01WARNOLDEST"`)
	if crit < 0 || warn < 0 || crit > warn {
		t.Fatalf("critical at %d, warning at %d: want both, critical first:\n%s", crit, warn, top)
	}
	for _, want := range []string{"Open alerts (2)", "<code>reaper-overdue</code> on platform", `<span class="tag">acknowledged</span>`,
		"<code>reaper-mass-due</code> on environment alpha", `<span class="tag">muted</span>`, "First thing to do: "} {
		if !strings.Contains(top, want) {
			t.Errorf("alerts section lacks %q:\n%s", want, top)
		}
	}
	if strings.Contains(body, "01RESOLVED") {
		t.Error("a resolved alert is shown")
	}
}
