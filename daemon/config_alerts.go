package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/sink/smtp"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
	"github.com/chalupa-run/chalupa/storage"
)

// AlertsConfig is where alerts go (CHALUPA_ALERT_*; docs/operations.md,
// "Alerts", under Sinks): an SMTP server and its recipients, a webhook, both
// or neither. Nothing configured is no sink and no error.
type AlertsConfig struct {
	// SMTPURL is CHALUPA_ALERT_SMTP_URL: smtp://[USER@]HOST[:PORT]
	// (STARTTLS required) or smtps://.
	SMTPURL string
	// SMTPPasswordFile is CHALUPA_ALERT_SMTP_PASSWORD_FILE: a file holding
	// the SMTP password alone (mode 0600). Unset, the password comes from
	// secrets.env's CHALUPA_ALERT_SMTP_PASSWORD.
	SMTPPasswordFile string
	// EmailFrom is CHALUPA_ALERT_EMAIL_FROM, one address.
	EmailFrom string
	// EmailTo is CHALUPA_ALERT_EMAIL_TO, comma-separated addresses.
	EmailTo string
	// WebhookURL is CHALUPA_ALERT_WEBHOOK_URL. The whole URL is a secret
	// (chat webhooks carry their token in the path).
	WebhookURL Secret
	// WebhookFormat is CHALUPA_ALERT_WEBHOOK_FORMAT: json (the default),
	// slack or ntfy.
	WebhookFormat webhook.Format
	// WebhookSecret is CHALUPA_ALERT_WEBHOOK_SECRET, or the content of
	// CHALUPA_ALERT_WEBHOOK_SECRET_FILE: the json format's whsec_ signing
	// secret.
	WebhookSecret Secret
	// WebhookSecretFile is CHALUPA_ALERT_WEBHOOK_SECRET_FILE.
	WebhookSecretFile string

	// passwordFrom is where the SMTP password came from ("secrets.env"
	// or the file's path), "" without one. The password itself is held
	// by the sink alone: fmt prints an unexported field's value without
	// calling its String method.
	passwordFrom string
	// email and hook are the sinks validate built (nil when unset).
	email *smtp.Sink
	hook  *webhook.Sink
}

// smtpPasswordKey is the SMTP password's key in secrets.env. It is never
// read from the environment: a password there is visible to every process
// that can read the daemon's environment.
const smtpPasswordKey = "CHALUPA_ALERT_SMTP_PASSWORD"

// alertVariables are the alert sinks' rows.
func (c *Config) alertVariables() []variable {
	a := &c.Alerts
	emailGroup := "`CHALUPA_ALERT_SMTP_URL`, `CHALUPA_ALERT_SMTP_PASSWORD_FILE`, `CHALUPA_ALERT_EMAIL_FROM`, `CHALUPA_ALERT_EMAIL_TO`"
	hookGroup := "`CHALUPA_ALERT_WEBHOOK_URL`, `CHALUPA_ALERT_WEBHOOK_FORMAT`"
	secretGroup := "`CHALUPA_ALERT_WEBHOOK_SECRET`, `CHALUPA_ALERT_WEBHOOK_SECRET_FILE`"
	return []variable{
		{name: "CHALUPA_ALERT_SMTP_URL", ptr: &a.SMTPURL, load: func(_ *loader, v string) { a.SMTPURL = v }, show: a.smtpText,
			help: "alert email server: smtp://USER@HOST:587 (STARTTLS) or smtps://USER@HOST:465",
			doc: docRow{group: emailGroup, def: "unset: no email alerts",
				refusedWhen: "the URL not `smtp://[USER@]HOST[:PORT]` or `smtps://…` (no password, path or query); a user without a password or a password without a user; the password file unreadable or readable by group or others; `CHALUPA_ALERT_SMTP_PASSWORD` in the environment (then said alone, not also as a user without a password); `FROM` not one address; `TO` not 1–20 comma-separated addresses; any of them set without the URL",
				why:         "email over TLS only (STARTTLS required, or TLS from the first byte): the password is read from `secrets.env` (`CHALUPA_ALERT_SMTP_PASSWORD`) or the file, never the environment (see \"Alerts\", under Sinks)"}},
		{name: "CHALUPA_ALERT_SMTP_PASSWORD_FILE", ptr: &a.SMTPPasswordFile, load: func(_ *loader, v string) { a.SMTPPasswordFile = v }, show: a.passwordText,
			help: "file holding the SMTP password (else secrets.env's CHALUPA_ALERT_SMTP_PASSWORD)",
			doc:  docRow{group: emailGroup}},
		{name: "CHALUPA_ALERT_EMAIL_FROM", ptr: &a.EmailFrom, load: func(_ *loader, v string) { a.EmailFrom = v }, show: func() string { return orUnset(a.EmailFrom) },
			help: "alert email sender address",
			doc:  docRow{group: emailGroup}},
		{name: "CHALUPA_ALERT_EMAIL_TO", ptr: &a.EmailTo, load: func(_ *loader, v string) { a.EmailTo = v }, show: func() string { return orUnset(a.EmailTo) },
			help: "alert email recipients, comma-separated",
			doc:  docRow{group: emailGroup}},
		{name: "CHALUPA_ALERT_WEBHOOK_URL", ptr: &a.WebhookURL, load: func(_ *loader, v string) { a.WebhookURL = Secret(v) }, show: a.webhookText,
			help: "alert webhook URL, a secret in full (https; http only to loopback)",
			doc: docRow{group: hookGroup, def: "unset: no webhook; format `json`",
				refusedWhen: "the URL not absolute `https` (`http` only to a loopback host); the format not `json`, `slack` or `ntfy`; the format set without the URL",
				why:         "the whole URL is a secret (chat webhooks carry their token in the path): `config check` shows its scheme and host only, logs name the sink only"}},
		{name: "CHALUPA_ALERT_WEBHOOK_FORMAT", ptr: &a.WebhookFormat, load: func(_ *loader, v string) { a.WebhookFormat = webhook.Format(v) },
			show: func() string { f, _ := webhook.ParseFormat(string(a.WebhookFormat)); return string(f) },
			help: "alert webhook body: json (signed), slack or ntfy",
			doc:  docRow{group: hookGroup}},
		c.secretVar("CHALUPA_ALERT_WEBHOOK_SECRET", &a.WebhookSecret, "the json webhook's whsec_ signing secret",
			docRow{group: secretGroup, def: "unset",
				refusedWhen: "missing with format `json` (the refusal says json needs one of the two, and how to make one); not `whsec_` and base64 of 24–64 bytes (a bad file is named as `CHALUPA_ALERT_WEBHOOK_SECRET_FILE` with its path); set with `slack` or `ntfy`; both the variable and the file set; the file unreadable or readable by group or others",
				why:         "Standard Webhooks' signing secret: a receiver verifies `webhook-signature` with it (see \"Alerts\", under Sinks)"}),
		{name: "CHALUPA_ALERT_WEBHOOK_SECRET_FILE", ptr: &a.WebhookSecretFile, load: func(_ *loader, v string) { a.WebhookSecretFile = v },
			show: func() string { return orUnset(a.WebhookSecretFile) },
			help: "file holding the json webhook's signing secret",
			doc:  docRow{group: secretGroup}},
	}
}

// smtpText previews CHALUPA_ALERT_SMTP_URL: the sink's scheme, host, port
// and what it requires, or that email is off.
func (a *AlertsConfig) smtpText() string {
	switch {
	case a.email != nil:
		return a.email.Preview()
	case a.SMTPURL == "":
		return "(unset: no email alerts)"
	}
	return "[invalid]"
}

// passwordText previews the SMTP password: where it comes from, never its
// value.
func (a *AlertsConfig) passwordText() string {
	switch {
	case a.passwordFrom != "":
		return "set (secret, from " + a.passwordFrom + ")"
	case a.SMTPPasswordFile != "":
		return a.SMTPPasswordFile
	}
	return "(unset)"
}

// webhookText previews CHALUPA_ALERT_WEBHOOK_URL: the format, scheme and
// host only.
func (a *AlertsConfig) webhookText() string {
	switch {
	case a.hook != nil:
		return "set (secret): " + a.hook.Preview()
	case a.WebhookURL == "":
		return "(unset: no webhook alerts)"
	}
	return "set (secret)"
}

// validateAlerts reads the sinks' secrets from their files and builds each
// configured sink, so a sink that could not send is refused at start
// (docs/operations.md, "Alerts", under Sinks).
func (c *Config) validateAlerts(l *loader) {
	a := &c.Alerts
	passwordInEnv := l.get(smtpPasswordKey) != ""
	if passwordInEnv {
		l.bad("%s is read from secrets.env or CHALUPA_ALERT_SMTP_PASSWORD_FILE, never from the environment", smtpPasswordKey)
	}
	c.validateEmail(l, passwordInEnv)
	if a.WebhookURL == "" {
		if a.WebhookFormat != "" || a.WebhookSecret != "" || a.WebhookSecretFile != "" {
			l.bad("CHALUPA_ALERT_WEBHOOK_FORMAT, CHALUPA_ALERT_WEBHOOK_SECRET or CHALUPA_ALERT_WEBHOOK_SECRET_FILE is set but CHALUPA_ALERT_WEBHOOK_URL is not")
		}
		return
	}
	if a.WebhookSecretFile != "" {
		if a.WebhookSecret != "" {
			l.bad("CHALUPA_ALERT_WEBHOOK_SECRET and CHALUPA_ALERT_WEBHOOK_SECRET_FILE are both set: set one")
			return
		}
		s, ok := readSecretFile(l, "CHALUPA_ALERT_WEBHOOK_SECRET_FILE", a.WebhookSecretFile)
		if !ok {
			return
		}
		a.WebhookSecret = s
	}
	if a.WebhookSecret == "" && (a.WebhookFormat == "" || a.WebhookFormat == webhook.JSON) {
		l.bad("CHALUPA_ALERT_WEBHOOK_FORMAT json (the default) needs CHALUPA_ALERT_WEBHOOK_SECRET or CHALUPA_ALERT_WEBHOOK_SECRET_FILE: a whsec_ signing secret, made by echo \"whsec_$(head -c 32 /dev/urandom | base64)\"")
		return
	}
	hook, err := webhook.New(webhook.Config{URL: a.WebhookURL.Reveal(), Format: a.WebhookFormat, Secret: a.WebhookSecret.Reveal()})
	if errors.Is(err, webhook.ErrSecret) && a.WebhookSecretFile != "" {
		// Name what the operator set: the file, not the variable it stands for.
		l.bad("CHALUPA_ALERT_WEBHOOK_SECRET_FILE (%s) must hold whsec_ followed by base64 of 24–64 random bytes (echo \"whsec_$(head -c 32 /dev/urandom | base64)\")", a.WebhookSecretFile)
		return
	}
	if err != nil {
		l.bad("%v", err)
		return
	}
	a.hook = hook
}

// validateEmail builds the email sink from CHALUPA_ALERT_SMTP_URL, the
// password (the file, else secrets.env), FROM and TO. passwordInEnv: the
// password was refused in the environment already, so a user without a
// password is not refused a second time.
func (c *Config) validateEmail(l *loader, passwordInEnv bool) {
	a := &c.Alerts
	if a.SMTPURL == "" {
		if a.SMTPPasswordFile != "" || a.EmailFrom != "" || a.EmailTo != "" {
			l.bad("CHALUPA_ALERT_SMTP_PASSWORD_FILE, CHALUPA_ALERT_EMAIL_FROM or CHALUPA_ALERT_EMAIL_TO is set but CHALUPA_ALERT_SMTP_URL is not")
		}
		return
	}
	var password Secret
	if a.SMTPPasswordFile != "" {
		s, ok := readSecretFile(l, "CHALUPA_ALERT_SMTP_PASSWORD_FILE", a.SMTPPasswordFile)
		if !ok {
			return
		}
		password, a.passwordFrom = s, a.SMTPPasswordFile
	} else if l.dataDirOK {
		// validateSecrets has refused an unreadable or exposed file.
		if m, err := ReadSecretsFile(filepath.Join(c.DataDir, SecretsFileName)); err == nil && m[smtpPasswordKey] != "" {
			password, a.passwordFrom = Secret(m[smtpPasswordKey]), SecretsFileName
		}
	}
	email, err := smtp.New(smtp.Config{URL: a.SMTPURL, Password: password.Reveal(), From: a.EmailFrom, To: a.EmailTo})
	if errors.Is(err, smtp.ErrPassword) && passwordInEnv && password == "" {
		return
	}
	if err != nil {
		l.bad("%v", err)
		return
	}
	a.email = email
}

// readSecretFile reads a file holding one secret (its trailing newline
// dropped), refusing one that group or others can read, as secrets.env.
// Problems name the variable, never the content.
func readSecretFile(l *loader, name, path string) (Secret, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		l.bad("%s cannot be read (%s)", name, errKind(err))
		return "", false
	}
	if fi.Mode().Perm()&0o077 != 0 {
		l.bad("%s is readable by group or others (chmod 600 it)", name)
		return "", false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		l.bad("%s cannot be read (%s)", name, errKind(err))
		return "", false
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" || strings.ContainsAny(s, "\r\n") {
		l.bad("%s must hold the secret alone, on one line", name)
		return "", false
	}
	return Secret(s), true
}

// AlertSinks are the configured sinks, email first: none when nothing is
// configured (docs/operations.md, "Alerts", under Sinks).
func (c *Config) AlertSinks() []alerts.Sink {
	var out []alerts.Sink
	if c.Alerts.email != nil {
		out = append(out, c.Alerts.email)
	}
	if c.Alerts.hook != nil {
		out = append(out, c.Alerts.hook)
	}
	return out
}

// AlertSinkPreviews are `config check`'s lines for the configured sinks,
// "NAME: PREVIEW" each (URLs as scheme and host only, secrets as "set"),
// in AlertSinks' order.
func (c *Config) AlertSinkPreviews() []string {
	var out []string
	if c.Alerts.email != nil {
		out = append(out, smtp.Name+": "+c.Alerts.email.Preview())
	}
	if c.Alerts.hook != nil {
		out = append(out, webhook.Name+": "+c.Alerts.hook.Preview())
	}
	return out
}

// newAlerter builds the alerter over the configured sinks, its metrics
// registered on reg. With no sink it still runs: alerts are recorded and
// nothing is sent (docs/operations.md, "Alerts"). Errors: alerter.New's.
func newAlerter(cfg *Config, db *storage.DB, clock clockwork.Clock, log zerolog.Logger, reg prometheus.Registerer) (*alerter.Alerter, error) {
	sinks := cfg.AlertSinks()
	if len(sinks) == 0 {
		log.Info().Msg("no alert sink is configured: alerts are recorded, nothing is sent (docs/operations.md, \"Alerts\")")
	}
	return alerter.New(alerter.Config{DB: db, Sinks: sinks, Clock: clock, Log: log.With().Str("loop", LoopAlerter).Logger(), Registerer: reg})
}

// LoopAlerter is the alerter loop's name in logs. It has no switch: a
// paused alerter would silence the operator, and it changes nothing in the
// fleet (docs/operations.md, "Loop switches").
const LoopAlerter = "alerter"

// alerterLoop runs the alerter as one of the daemon's loops.
type alerterLoop struct{ *alerter.Alerter }

// Name implements Loop.
func (alerterLoop) Name() string { return LoopAlerter }
