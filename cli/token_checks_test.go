package cli

import (
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
)

// TestStatusCheckTokens: `admin status --check-tokens` against a daemon
// holding a read token DigitalOcean refuses and a write token it accepts
// checks both now and says, per variable, which works and which is
// refused (with the status), never a token's value; with --json the same
// per variable; without the flag no call is made (docs/operations.md,
// "Alerts").
func TestStatusCheckTokens(t *testing.T) {
	fake := dofake.New(t)
	read, write := fake.AddToken("read", dofake.ReadOnly...), fake.AddToken("write", dofake.FullAccess...)
	fake.RevokeToken("read")
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{"CHALUPA_DO_API_URL": fake.URL,
		"DIGITALOCEAN_READ_TOKEN": read, "DIGITALOCEAN_WRITE_TOKEN": write, "CHALUPA_COSTS": "off"}})
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": p.Admin.Token, "CHALUPA_URL": p.URL}

	out, code := runIn(env, "", "admin", "status")
	if code != 0 || len(fake.Requests(dofake.OnRoute(dofake.RouteGetAccount))) != 0 {
		t.Fatalf("admin status without --check-tokens: exit %d, %d account calls:\n%s", code, len(fake.Requests()), out)
	}
	if !strings.Contains(words(out), "token DIGITALOCEAN_READ_TOKEN unchecked") {
		t.Errorf("before any check, status does not say the read token is unchecked:\n%s", out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"text", []string{"admin", "status", "--check-tokens"}, []string{
			"token DIGITALOCEAN_READ_TOKEN refused, checked ", "DIGITALOCEAN_READ_TOKEN: DigitalOcean refused the token on a read-only check (GET /v2/account): digitalocean Account (read token): 401 token refused",
			"token DIGITALOCEAN_WRITE_TOKEN works, checked "}},
		{"json", []string{"admin", "status", "--check-tokens", "--json"}, []string{
			`"variable": "DIGITALOCEAN_READ_TOKEN",` + "\n      \"state\": \"refused\"", `"variable": "DIGITALOCEAN_WRITE_TOKEN",` + "\n      \"state\": \"works\""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(fake.Requests(dofake.OnRoute(dofake.RouteGetAccount)))
			out, code := runIn(env, "", tc.args...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(words(out), words(w)) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, read) || strings.Contains(out, write) {
				t.Errorf("output carries a token:\n%s", out)
			}
			if got := len(fake.Requests(dofake.OnRoute(dofake.RouteGetAccount))) - n; got != 2 {
				t.Errorf("--check-tokens made %d account calls, want 2 (one per token)", got)
			}
		})
	}
}

// TestStatusCheckTokensNone: `admin status --check-tokens` on a daemon
// with no DigitalOcean token says there is none to check, rather than
// printing nothing about tokens.
func TestStatusCheckTokensNone(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: map[string]string{"CHALUPA_COSTS": "off"}})
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": p.Admin.Token, "CHALUPA_URL": p.URL}
	out, code := runIn(env, "", "admin", "status", "--check-tokens")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !strings.Contains(words(out), "tokens no DigitalOcean token is configured: none to check") {
		t.Errorf("output does not say there is no token to check:\n%s", out)
	}
}

// words is s with every run of white space made one space (tabwriter's
// alignment is not what the test is about).
func words(s string) string { return strings.Join(strings.Fields(s), " ") }
