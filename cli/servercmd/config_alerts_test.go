package servercmd

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestConfigCheckPreviewsAlertSinks: `config check` prints one "alert
// sink" line per configured sink — email and webhook at once — with the
// webhook as scheme and host only and no secret; with none configured it
// says so, and the configuration is still ok.
func TestConfigCheckPreviewsAlertSinks(t *testing.T) {
	t.Parallel()
	const token = "T0KEN-9d1f-in-the-path"
	secret := "whsec_" + strings.Repeat("QUJD", 8)
	t.Run("none", func(t *testing.T) {
		out, errOut, code := runStreams(map[string]string{"CHALUPA_DATA_DIR": t.TempDir()}, "", "config", "check")
		if code != 0 || !strings.Contains(out, "alert sink") || !strings.Contains(out, "none: no alert reaches a person") {
			t.Fatalf("exit %d, want 0 with the no-sink line\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
	env := map[string]string{
		"CHALUPA_DATA_DIR":             t.TempDir(),
		"CHALUPA_ALERT_SMTP_URL":       "smtps://mail.example.com",
		"CHALUPA_ALERT_EMAIL_FROM":     "alerts@example.com",
		"CHALUPA_ALERT_EMAIL_TO":       "oncall@example.com",
		"CHALUPA_ALERT_WEBHOOK_URL":    "https://hooks.example.com/services/" + token,
		"CHALUPA_ALERT_WEBHOOK_SECRET": secret,
	}
	t.Run("table", func(t *testing.T) {
		out, errOut, code := runStreams(env, "", "config", "check")
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		var sinks []string
		for _, l := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(l, "alert sink"); ok {
				sinks = append(sinks, strings.TrimSpace(rest))
			}
		}
		if len(sinks) != 2 || sinks[0] != "email: smtps://mail.example.com:465 (TLS; no authentication) from alerts@example.com to 1 recipient(s)" ||
			sinks[1] != "webhook: json to https://hooks.example.com/…" {
			t.Errorf("alert sink lines = %q", sinks)
		}
		if strings.Contains(out+errOut, token) || strings.Contains(out+errOut, secret) {
			t.Errorf("config check prints the webhook's path or secret:\n%s", out)
		}
	})
	t.Run("json", func(t *testing.T) {
		out, _, code := runStreams(env, "", "config", "check", "--json")
		var m map[string]string
		if err := json.Unmarshal([]byte(out), &m); code != 0 || err != nil || !strings.Contains(m["alertSinks"], "webhook: json to https://hooks.example.com/…") {
			t.Fatalf("exit %d (%v), want alertSinks in the JSON:\n%s", code, err, out)
		}
		if strings.Contains(out, token) || strings.Contains(out, secret) {
			t.Errorf("config check --json prints the webhook's path or secret:\n%s", out)
		}
	})
}
