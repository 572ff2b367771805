package e2e

// `chalupa admin env policy` as built, against a real `chalupa serve`
// (docs/operations.md, "Session policies").

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

// TestAdminEnvPolicyCLI: --kind and --max set the policy, which `env list`
// shows; contradictory or missing flags are usage errors (exit 2) that send
// nothing; a refused value exits 1 naming the code; --clear removes it.
func TestAdminEnvPolicyCLI(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	d := proctest.StartDaemon(t, bin, nil)
	admin := map[string]string{"CHALUPA_ADMIN_TOKEN": d.AdminToken(), "CHALUPA_URL": d.URL}
	ingestE2ECLI(t, bin, d, "admin", "env", "create", "demo-harbor")

	out := ingestE2ECLI(t, bin, d, "admin", "env", "policy", "demo-harbor", "--kind", "demo", "--max", "2h")
	if !strings.Contains(out, "demo, at most 2h0m0s") {
		t.Fatalf("set:\n%s", out)
	}
	var list adminapi.EnvironmentList
	out = ingestE2ECLI(t, bin, d, "admin", "env", "list", "--json")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Environments) != 1 || list.Environments[0].SessionPolicy == nil ||
		list.Environments[0].SessionPolicy.Kind != "demo" || list.Environments[0].SessionPolicy.MaxSessionSeconds != 7200 {
		t.Fatalf("env list --json after set: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"clear with kind", []string{"--clear", "--kind", "test"}, exitUsage, "--clear takes no"},
		{"kind without max", []string{"--kind", "test"}, exitUsage, "give --kind and --max"},
		{"fractional seconds", []string{"--kind", "test", "--max", "90.5s"}, exitUsage, "whole seconds"},
		{"too short", []string{"--kind", "test", "--max", "30s"}, 1, "invalid_max_session"},
		{"unknown kind", []string{"--kind", "prod", "--max", "1h"}, 1, "invalid_kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := proctest.RunCommand(t, bin, "", admin, append([]string{"admin", "env", "policy", "demo-harbor"}, tc.args...)...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want %d mentioning %q:\n%s", code, tc.code, tc.want, out)
			}
		})
	}
	if out := ingestE2ECLI(t, bin, d, "admin", "env", "list"); !strings.Contains(out, "demo, at most 2h0m0s") {
		t.Fatalf("the refusals changed the policy:\n%s", out)
	}
	if out := ingestE2ECLI(t, bin, d, "admin", "env", "policy", "demo-harbor", "--clear"); !strings.Contains(out, "cleared the session policy of demo-harbor") {
		t.Fatalf("clear:\n%s", out)
	}
	if out := ingestE2ECLI(t, bin, d, "admin", "env", "list"); strings.Contains(out, "at most") {
		t.Fatalf("a policy after --clear:\n%s", out)
	}
}
