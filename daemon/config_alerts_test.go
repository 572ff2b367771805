package daemon_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/daemon"
)

// hookToken is the secret part of the test webhook URLs.
const hookToken = "hook-token-in-path-51c0"

func whsec() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// writeFile writes content with mode perm (chmod after the write: a
// daemon.App started by another test of the process sets umask 077) and
// returns its path.
func writeFile(t *testing.T, dir, name, content string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAlertSinksNoneConfigured: with no CHALUPA_ALERT_* set the
// configuration is accepted with no sink.
func TestAlertSinksNoneConfigured(t *testing.T) {
	t.Parallel()
	cfg, err := daemon.LoadConfig(envFunc(goodEnv(t.TempDir())))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if s := cfg.AlertSinks(); len(s) != 0 {
		t.Errorf("AlertSinks = %d sinks, want none", len(s))
	}
}

// TestAlertSinksBoth: email and webhook at once, the SMTP password from
// secrets.env or from CHALUPA_ALERT_SMTP_PASSWORD_FILE and the signing
// secret from CHALUPA_ALERT_WEBHOOK_SECRET_FILE: both sinks are built, the
// previews show scheme and host only, and neither the password, the
// secret nor the webhook URL's path appears however the configuration is
// printed.
func TestAlertSinksBoth(t *testing.T) {
	t.Parallel()
	for _, from := range []string{"secrets.env", "file"} {
		t.Run(from, func(t *testing.T) {
			dir := t.TempDir()
			password, secret := "smtp-pass-"+base64.RawURLEncoding.EncodeToString([]byte(t.Name())), whsec()
			env := goodEnv(dir)
			env["CHALUPA_ALERT_SMTP_URL"] = "smtp://alerts@mail.example.com"
			env["CHALUPA_ALERT_EMAIL_FROM"] = "chalupa <alerts@ops.example.com>"
			env["CHALUPA_ALERT_EMAIL_TO"] = "oncall@example.com, second@example.org"
			env["CHALUPA_ALERT_WEBHOOK_URL"] = "https://hooks.example.com/services/" + hookToken
			env["CHALUPA_ALERT_WEBHOOK_SECRET_FILE"] = writeFile(t, dir, "whsec", secret+"\n", 0o600)
			if from == "file" {
				env["CHALUPA_ALERT_SMTP_PASSWORD_FILE"] = writeFile(t, dir, "smtp-password", password+"\n", 0o600)
			} else {
				writeFile(t, dir, daemon.SecretsFileName, "CHALUPA_ALERT_SMTP_PASSWORD="+password+"\n", 0o600)
			}
			cfg, err := daemon.LoadConfig(envFunc(env))
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			var names []string
			for _, s := range cfg.AlertSinks() {
				names = append(names, s.Name())
			}
			if strings.Join(names, ",") != "email,webhook" {
				t.Fatalf("AlertSinks = %v, want email and webhook", names)
			}
			rows := map[string]string{}
			for _, r := range cfg.Redacted() {
				rows[r[0]] = r[1]
			}
			if got, want := rows["CHALUPA_ALERT_WEBHOOK_URL"], "set (secret): json to https://hooks.example.com/…"; got != want {
				t.Errorf("CHALUPA_ALERT_WEBHOOK_URL shows %q, want %q", got, want)
			}
			if got := rows["CHALUPA_ALERT_SMTP_URL"]; !strings.HasPrefix(got, "smtp://mail.example.com:587 (STARTTLS required; user alerts, password set (secret))") {
				t.Errorf("CHALUPA_ALERT_SMTP_URL shows %q", got)
			}
			if got := rows["CHALUPA_ALERT_SMTP_PASSWORD_FILE"]; !strings.HasPrefix(got, "set (secret, from ") {
				t.Errorf("CHALUPA_ALERT_SMTP_PASSWORD_FILE shows %q", got)
			}
			if got := rows["CHALUPA_ALERT_WEBHOOK_SECRET"]; got != "[redacted]" {
				t.Errorf("CHALUPA_ALERT_WEBHOOK_SECRET shows %q, want [redacted]", got)
			}
			if p := cfg.AlertSinkPreviews(); len(p) != 2 || !strings.HasPrefix(p[0], "email: ") || !strings.HasPrefix(p[1], "webhook: ") {
				t.Errorf("AlertSinkPreviews = %q", p)
			}
			js, err := json.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			printed := fmt.Sprintf("%v\n%+v\n%#v\n%s\n%v\n%v", cfg, *cfg, *cfg, js, cfg.Redacted(), cfg.AlertSinkPreviews())
			for what, v := range map[string]string{"the SMTP password": password, "the signing secret": strings.TrimPrefix(secret, "whsec_"), "the webhook URL's path": hookToken} {
				if strings.Contains(printed, v) {
					t.Errorf("%s appears when the configuration is printed", what)
				}
			}
		})
	}
}

// TestAlertSinkSends: the webhook sink the configuration builds posts to
// its URL (a loopback ntfy receiver here).
func TestAlertSinkSends(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.URL.Path + " " + r.Header.Get("Title") + " " + string(b)
	}))
	t.Cleanup(srv.Close)
	env := goodEnv(t.TempDir())
	env["CHALUPA_ALERT_WEBHOOK_URL"] = srv.URL + "/chalupa-" + hookToken
	env["CHALUPA_ALERT_WEBHOOK_FORMAT"] = "ntfy"
	cfg, err := daemon.LoadConfig(envFunc(env))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	sinks := cfg.AlertSinks()
	if len(sinks) != 1 {
		t.Fatalf("AlertSinks = %d sinks, want 1", len(sinks))
	}
	m := alerts.Message{ID: "01JTEST", Event: alerts.Test, Severity: alerts.Info, Title: "chalupa test message", Text: "It works.", At: time.Now()}
	if err := sinks[0].Send(context.Background(), m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if r := <-got; !strings.HasPrefix(r, "/chalupa-"+hookToken+" chalupa test message It works.") {
		t.Errorf("the receiver got %q", r)
	}
}

// TestAlertConfigRefusals changes one alert setting of a good environment
// per case: LoadConfig refuses it naming the variable, never repeating a
// URL's path, a password or a secret.
func TestAlertConfigRefusals(t *testing.T) {
	t.Parallel()
	secret := whsec()
	email := map[string]string{"CHALUPA_ALERT_SMTP_URL": "smtps://mail.example.com", "CHALUPA_ALERT_EMAIL_FROM": "alerts@example.com", "CHALUPA_ALERT_EMAIL_TO": "oncall@example.com"}
	hook := map[string]string{"CHALUPA_ALERT_WEBHOOK_URL": "https://hooks.example.com/" + hookToken, "CHALUPA_ALERT_WEBHOOK_SECRET": secret}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		set  map[string]string
		// files are written into the data dir, name to content (0600),
		// or with mode 0644 when the name ends in "!".
		files map[string]string
		want  string
	}{
		{"password in the environment", with(email, "CHALUPA_ALERT_SMTP_PASSWORD", "env-pass-"+hookToken), nil, "CHALUPA_ALERT_SMTP_PASSWORD is read from secrets.env"},
		{"password in the URL", with(email, "CHALUPA_ALERT_SMTP_URL", "smtp://u:pw-"+hookToken+"@mail.example.com"), nil, "CHALUPA_ALERT_SMTP_URL must not hold a password"},
		{"user without password", with(email, "CHALUPA_ALERT_SMTP_URL", "smtp://u@mail.example.com"), nil, "set both or neither"},
		{"not smtp", with(email, "CHALUPA_ALERT_SMTP_URL", "https://mail.example.com/"+hookToken), nil, "CHALUPA_ALERT_SMTP_URL must be"},
		{"password file readable by others", with(email, "CHALUPA_ALERT_SMTP_URL", "smtp://u@mail.example.com", "CHALUPA_ALERT_SMTP_PASSWORD_FILE", "pw!"), map[string]string{"pw!": "pw-" + hookToken}, "CHALUPA_ALERT_SMTP_PASSWORD_FILE is readable by group or others"},
		{"password file missing", with(email, "CHALUPA_ALERT_SMTP_URL", "smtp://u@mail.example.com", "CHALUPA_ALERT_SMTP_PASSWORD_FILE", "nope"), nil, "CHALUPA_ALERT_SMTP_PASSWORD_FILE cannot be read"},
		{"no recipients", with(email, "CHALUPA_ALERT_EMAIL_TO", ""), nil, "CHALUPA_ALERT_EMAIL_TO must be"},
		{"bad from", with(email, "CHALUPA_ALERT_EMAIL_FROM", "not-an-address"), nil, "CHALUPA_ALERT_EMAIL_FROM must be"},
		{"recipients without server", map[string]string{"CHALUPA_ALERT_EMAIL_TO": "oncall@example.com"}, nil, "CHALUPA_ALERT_SMTP_URL is not"},
		{"http webhook off loopback", with(hook, "CHALUPA_ALERT_WEBHOOK_URL", "http://hooks.example.com/"+hookToken), nil, "CHALUPA_ALERT_WEBHOOK_URL must be"},
		{"unknown format", with(hook, "CHALUPA_ALERT_WEBHOOK_FORMAT", "teams"), nil, "CHALUPA_ALERT_WEBHOOK_FORMAT must be"},
		{"json without secret", with(hook, "CHALUPA_ALERT_WEBHOOK_SECRET", ""), nil, "json (the default) needs CHALUPA_ALERT_WEBHOOK_SECRET or CHALUPA_ALERT_WEBHOOK_SECRET_FILE"},
		{"malformed secret", with(hook, "CHALUPA_ALERT_WEBHOOK_SECRET", "whsec_short"), nil, "CHALUPA_ALERT_WEBHOOK_SECRET must be whsec_"},
		{"malformed secret file", with(hook, "CHALUPA_ALERT_WEBHOOK_SECRET", "", "CHALUPA_ALERT_WEBHOOK_SECRET_FILE", "whsec"), map[string]string{"whsec": "whsec_short"}, "CHALUPA_ALERT_WEBHOOK_SECRET_FILE (/"},
		{"secret with slack", with(hook, "CHALUPA_ALERT_WEBHOOK_FORMAT", "slack"), nil, "CHALUPA_ALERT_WEBHOOK_SECRET is set but"},
		{"secret and file", with(hook, "CHALUPA_ALERT_WEBHOOK_SECRET_FILE", "whsec"), map[string]string{"whsec": secret}, "both set"},
		{"format without URL", map[string]string{"CHALUPA_ALERT_WEBHOOK_FORMAT": "slack"}, nil, "CHALUPA_ALERT_WEBHOOK_URL is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := goodEnv(dir)
			for name, content := range tc.files {
				perm := os.FileMode(0o600)
				if strings.HasSuffix(name, "!") {
					perm = 0o644
				}
				writeFile(t, dir, name, content, perm)
			}
			for k, v := range tc.set {
				if strings.HasSuffix(k, "_FILE") && v != "" {
					v = filepath.Join(dir, v)
				}
				env[k] = v
			}
			_, err := daemon.LoadConfig(envFunc(env))
			var ce *daemon.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("LoadConfig: %v, want a *ConfigError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadConfig: %v, want %q", err, tc.want)
			}
			for _, bad := range []string{hookToken, strings.TrimPrefix(secret, "whsec_")} {
				if strings.Contains(err.Error(), bad) {
					t.Errorf("the refusal repeats a secret value: %v", err)
				}
			}
		})
	}
}

// TestSMTPPasswordInEnvironmentSaidOnce: a password in the environment with
// a user in CHALUPA_ALERT_SMTP_URL is refused as "never from the
// environment", without a second "user and password go together" line.
func TestSMTPPasswordInEnvironmentSaidOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := goodEnv(dir)
	for k, v := range map[string]string{"CHALUPA_ALERT_SMTP_URL": "smtp://u@mail.example.com", "CHALUPA_ALERT_EMAIL_FROM": "alerts@example.com",
		"CHALUPA_ALERT_EMAIL_TO": "oncall@example.com", "CHALUPA_ALERT_SMTP_PASSWORD": "env-pass"} {
		env[k] = v
	}
	_, err := daemon.LoadConfig(envFunc(env))
	if err == nil || !strings.Contains(err.Error(), "never from the environment") {
		t.Fatalf("LoadConfig: %v, want the password refused as never from the environment", err)
	}
	if strings.Contains(err.Error(), "go together") {
		t.Errorf("LoadConfig: %v, want no second line about the user and the password", err)
	}
}

// TestSMTPPasswordKeptInSecretsFile: on the embedded default, generating
// the missing secrets into secrets.env keeps the operator's
// CHALUPA_ALERT_SMTP_PASSWORD, and the next load still builds the email
// sink with it.
func TestSMTPPasswordKeptInSecretsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, daemon.SecretsFileName, "CHALUPA_ALERT_SMTP_PASSWORD=kept-"+hookToken+"\n", 0o600)
	env := map[string]string{"CHALUPA_DATA_DIR": dir, "CHALUPA_ALERT_SMTP_URL": "smtp://alerts@mail.example.com",
		"CHALUPA_ALERT_EMAIL_FROM": "alerts@example.com", "CHALUPA_ALERT_EMAIL_TO": "oncall@example.com"}
	cfg, err := daemon.LoadConfig(envFunc(env))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if wrote, err := cfg.EnsureSecrets(); err != nil || !wrote {
		t.Fatalf("EnsureSecrets = %v, %v; want the generated secrets written", wrote, err)
	}
	m, err := daemon.ReadSecretsFile(filepath.Join(dir, daemon.SecretsFileName))
	if err != nil || m["CHALUPA_ALERT_SMTP_PASSWORD"] != "kept-"+hookToken || m["CHALUPA_ADMIN_TOKEN"] == "" {
		t.Fatalf("secrets.env after EnsureSecrets lost the password or lacks the admin token (%v)", err)
	}
	cfg, err = daemon.LoadConfig(envFunc(env))
	if err != nil || len(cfg.AlertSinks()) != 1 {
		t.Fatalf("LoadConfig after EnsureSecrets: %v", err)
	}
}
