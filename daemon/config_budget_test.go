package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/storage"
)

// TestNotifyConfigRefusals: CHALUPA_BUDGET_USD_MONTH, CHALUPA_ALERT_DIGEST
// and CHALUPA_ALERT_TZ are refused naming the variable, never echoing the
// value (docs/operations.md, "Configuration").
func TestNotifyConfigRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		set     map[string]string
		refused string
	}{
		{"budget not a number", map[string]string{"CHALUPA_BUDGET_USD_MONTH": "lots"}, "CHALUPA_BUDGET_USD_MONTH"},
		{"budget zero", map[string]string{"CHALUPA_BUDGET_USD_MONTH": "0"}, "CHALUPA_BUDGET_USD_MONTH"},
		{"budget negative", map[string]string{"CHALUPA_BUDGET_USD_MONTH": "-250"}, "CHALUPA_BUDGET_USD_MONTH"},
		{"budget NaN", map[string]string{"CHALUPA_BUDGET_USD_MONTH": "NaN"}, "CHALUPA_BUDGET_USD_MONTH"},
		{"budget past the bound", map[string]string{"CHALUPA_BUDGET_USD_MONTH": "2e7"}, "CHALUPA_BUDGET_USD_MONTH"},
		{"budget with costs off", map[string]string{"CHALUPA_BUDGET_USD_MONTH": "250", "CHALUPA_COSTS": "off"}, "CHALUPA_BUDGET_USD_MONTH"},
		{"digest hour 24", map[string]string{"CHALUPA_ALERT_DIGEST": "24:00"}, "CHALUPA_ALERT_DIGEST"},
		{"digest one-digit hour", map[string]string{"CHALUPA_ALERT_DIGEST": "7:30"}, "CHALUPA_ALERT_DIGEST"},
		{"digest words", map[string]string{"CHALUPA_ALERT_DIGEST": "morning"}, "CHALUPA_ALERT_DIGEST"},
		{"zone unknown", map[string]string{"CHALUPA_ALERT_DIGEST": "07:30", "CHALUPA_ALERT_TZ": "Mars/Olympus_Mons"}, "CHALUPA_ALERT_TZ"},
		{"zone Local", map[string]string{"CHALUPA_ALERT_DIGEST": "07:30", "CHALUPA_ALERT_TZ": "Local"}, "CHALUPA_ALERT_TZ"},
		{"zone without the digest", map[string]string{"CHALUPA_ALERT_TZ": "Europe/Paris"}, "CHALUPA_ALERT_TZ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := goodEnv(t.TempDir())
			for k, v := range tc.set {
				env[k] = v
			}
			_, err := daemon.LoadConfig(envFunc(env))
			var ce *daemon.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("LoadConfig: %v, want a refusal", err)
			}
			named := false
			for _, p := range ce.Problems {
				named = named || strings.Contains(p, tc.refused)
				for k, v := range tc.set {
					if k != "CHALUPA_COSTS" && len(v) >= 3 && strings.Contains(p, v) { // "0" is in "10000000"
						t.Errorf("problem %q echoes the value of %s", p, k)
					}
				}
			}
			if !named {
				t.Fatalf("problems %q do not name %s", ce.Problems, tc.refused)
			}
		})
	}
}

// TestNotifyConfigShown: an accepted budget and digest are shown by the
// preview config check prints; unset, each says it is off.
func TestNotifyConfigShown(t *testing.T) {
	t.Parallel()
	shown := func(env map[string]string) map[string]string {
		t.Helper()
		cfg, err := daemon.LoadConfig(envFunc(env))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range cfg.Redacted() {
			out[kv[0]] = kv[1]
		}
		return out
	}
	env := goodEnv(t.TempDir())
	off := shown(env)
	if off["CHALUPA_BUDGET_USD_MONTH"] != "(unset: no budget alert)" || off["CHALUPA_ALERT_DIGEST"] != "(unset: no digest)" {
		t.Fatalf("unset: %q, %q", off["CHALUPA_BUDGET_USD_MONTH"], off["CHALUPA_ALERT_DIGEST"])
	}
	env["CHALUPA_BUDGET_USD_MONTH"], env["CHALUPA_ALERT_DIGEST"], env["CHALUPA_ALERT_TZ"] = "250", "07:30", "Europe/Paris"
	on := shown(env)
	if on["CHALUPA_BUDGET_USD_MONTH"] != "250 USD a month (alerts past 80 % and 100 %)" || on["CHALUPA_ALERT_DIGEST"] != "07:30 Europe/Paris" ||
		on["CHALUPA_ALERT_TZ"] != "Europe/Paris" {
		t.Fatalf("set: %q, %q, %q", on["CHALUPA_BUDGET_USD_MONTH"], on["CHALUPA_ALERT_DIGEST"], on["CHALUPA_ALERT_TZ"])
	}
}

// TestBudgetAfterCostPass: in the running daemon the budget is evaluated
// after each cost pass: a droplet inventory adopts (no agent) projects to
// the month's end past CHALUPA_BUDGET_USD_MONTH, and the budget alert is
// open at critical, naming it.
func TestBudgetAfterCostPass(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 7, 10, 12, 0, 0, 0, time.UTC))
	s := dofake.New(t, dofake.WithClock(clock))
	read := s.AddToken("read", dofake.ReadOnly...)
	write := s.AddToken("write", dofake.FullAccess...)
	d := daemontest.NewInProcess(t, daemontest.AppOptions{Clock: clock, Env: map[string]string{
		"DIGITALOCEAN_READ_TOKEN": read, "DIGITALOCEAN_WRITE_TOKEN": write, "CHALUPA_DO_API_URL": s.URL, "CHALUPA_BUDGET_USD_MONTH": "100"}})
	if _, err := d.Admin.CreateEnvironment(ctx, adminapi.CreateEnvironmentRequest{Slug: "demo"}); err != nil {
		t.Fatal(err)
	}
	drop := s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo"), Size: "gpu-h100x1-80gb", CreatedAt: clock.Now().Add(-2 * time.Hour)})
	if _, err := d.Admin.ReconcileCosts(ctx); err != nil {
		t.Fatal(err)
	}
	open, err := storage.OpenAlertFor(ctx, d.App.DB.Read, alerts.KindBudget, alerts.SubjectPlatform, "")
	if err != nil {
		t.Fatalf("no open budget alert after the pass: %v", err)
	}
	if open.Severity != string(alerts.Critical) || !strings.Contains(open.Detail, "no agent") ||
		!strings.Contains(open.Detail, fmt.Sprintf("(droplet %d)", drop.ID)) {
		t.Fatalf("budget alert %+v, want critical naming the adopted droplet", open)
	}
}
