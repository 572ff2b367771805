// Package webhook is the alert sink that POSTs each message to one URL
// (CHALUPA_ALERT_WEBHOOK_URL; docs/operations.md, "Alerts", under Sinks), in
// one of three formats: a versioned JSON body signed as Standard Webhooks
// specifies, a Slack incoming-webhook body (which Mattermost accepts, and
// Discord at its /slack URL suffix), or ntfy's plain text with headers.
//
// The whole URL is a secret: chat webhooks and ntfy topics carry their
// token in the path or query. It is never logged, printed or put in an
// error; errors name the sink ("webhook") and the kind of failure only.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/sink"
	"github.com/chalupa-run/chalupa/internal/origin"
)

// Format is the body the sink sends (CHALUPA_ALERT_WEBHOOK_FORMAT).
type Format string

// Formats.
const (
	// JSON is the default: the documented, versioned body (Body), signed
	// with the webhook-id, webhook-timestamp and webhook-signature
	// headers of Standard Webhooks.
	JSON Format = "json"
	// Slack is an incoming-webhook body: text, plus one attachment with
	// the severity's colour, the title, the text and the subjects.
	Slack Format = "slack"
	// Ntfy is ntfy's publish request: the text as a plain-text body, with
	// Title, Priority and Tags headers.
	Ntfy Format = "ntfy"
)

// Formats lists the formats in the order the docs name them.
var Formats = []Format{JSON, Slack, Ntfy}

// Limits and defaults (docs/operations.md, "Alerts", under Sinks).
const (
	// Name is the sink's name in logs, metrics and errors.
	Name = "webhook"
	// BodyVersion is the JSON body's "version": a receiver that reads
	// version 1 can rely on every field Body documents. A change that
	// removes or retypes a field makes version 2.
	BodyVersion = 1
	// DefaultTimeout bounds one send (connect, TLS, request, answer): a
	// slow receiver must not hold the delivery of other messages.
	DefaultTimeout = 10 * time.Second
	// MaxText is the most bytes of a message's text the JSON and Slack
	// bodies carry; the rest is cut with a marker. Slack shows an
	// attachment's text in full up to about this size; the outbox's own
	// size cap is smaller.
	MaxText = 8000
	// MaxNtfyText is the most bytes of text an ntfy body carries: ntfy
	// turns a message over 4,096 bytes into an attachment.
	MaxNtfyText = 4000
	// SecretPrefix starts a Standard Webhooks signing secret; base64 of
	// the key follows.
	SecretPrefix = "whsec_"
	// MinSecretBytes and MaxSecretBytes bound the decoded signing key, as
	// Standard Webhooks recommends (24 to 64 bytes).
	MinSecretBytes, MaxSecretBytes = 24, 64
	// maxAnswer is how much of an answer's body is read (and dropped) so
	// the connection can be reused; the body is never shown.
	maxAnswer = 64 << 10
)

// Errors of New: each names the variable, never its value.
var (
	// ErrURL: CHALUPA_ALERT_WEBHOOK_URL is not an absolute http(s) URL,
	// or is http to a host other than loopback.
	ErrURL = errors.New("CHALUPA_ALERT_WEBHOOK_URL must be an absolute https URL (http only to a loopback address)")
	// ErrFormat: CHALUPA_ALERT_WEBHOOK_FORMAT is not json, slack or ntfy.
	ErrFormat = errors.New("CHALUPA_ALERT_WEBHOOK_FORMAT must be json, slack or ntfy")
	// ErrSecret: the json format's signing secret is missing or not
	// whsec_ and base64 of 24–64 bytes.
	ErrSecret = errors.New("CHALUPA_ALERT_WEBHOOK_SECRET must be whsec_ followed by base64 of 24–64 random bytes (echo \"whsec_$(head -c 32 /dev/urandom | base64)\")")
	// ErrSecretUnused: a secret is set with the slack or ntfy format,
	// which are not signed.
	ErrSecretUnused = errors.New("CHALUPA_ALERT_WEBHOOK_SECRET is set but CHALUPA_ALERT_WEBHOOK_FORMAT is not json: slack and ntfy bodies are not signed")
)

// Config is one webhook sink's settings.
type Config struct {
	// URL is CHALUPA_ALERT_WEBHOOK_URL: https, or http to loopback. A
	// secret in full.
	URL string
	// Format is CHALUPA_ALERT_WEBHOOK_FORMAT; "" is JSON.
	Format Format
	// Secret is CHALUPA_ALERT_WEBHOOK_SECRET (or its _FILE): whsec_ and
	// base64 of the key; required for JSON, refused for the others.
	Secret string
	// Client sends the requests; nil is a client with DefaultTimeout
	// that follows no redirect. A client given here has its redirects
	// turned off all the same.
	Client *http.Client
	// Now is the clock of the webhook-timestamp header; nil is
	// time.Now.
	Now func() time.Time
}

// Sink posts messages to one webhook URL. It implements alerts.Sink; it is
// safe for concurrent use.
type Sink struct {
	url    *url.URL
	format Format
	key    []byte
	client *http.Client
	now    func() time.Time
}

var _ alerts.Sink = (*Sink)(nil)

// New checks c and returns its sink. Errors: ErrURL, ErrFormat, ErrSecret,
// ErrSecretUnused.
func New(c Config) (*Sink, error) {
	u, err := ParseURL(c.URL)
	if err != nil {
		return nil, err
	}
	f, err := ParseFormat(string(c.Format))
	if err != nil {
		return nil, err
	}
	s := &Sink{url: u, format: f, client: c.Client, now: c.Now}
	switch {
	case f == JSON:
		if s.key, err = ParseSecret(c.Secret); err != nil {
			return nil, err
		}
	case c.Secret != "":
		return nil, ErrSecretUnused
	}
	if s.client == nil {
		s.client = &http.Client{Timeout: DefaultTimeout}
	} else {
		cp := *s.client
		s.client = &cp
	}
	// A redirect would send the message (and its signature) somewhere
	// the operator did not name; its answer is the answer.
	s.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// ParseURL checks a webhook URL: absolute http(s) with a host, https
// unless the host is loopback. Errors (ErrURL) never repeat it.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, ErrURL
	}
	if u.Scheme == "http" && !origin.IsLoopbackHost(u.Hostname()) {
		return nil, ErrURL
	}
	return u, nil
}

// ParseFormat reads CHALUPA_ALERT_WEBHOOK_FORMAT; "" is JSON. Errors:
// ErrFormat.
func ParseFormat(v string) (Format, error) {
	if v == "" {
		return JSON, nil
	}
	for _, f := range Formats {
		if Format(v) == f {
			return f, nil
		}
	}
	return "", ErrFormat
}

// ParseSecret decodes a whsec_ secret into its key. Errors: ErrSecret.
func ParseSecret(v string) ([]byte, error) {
	b64, ok := strings.CutPrefix(v, SecretPrefix)
	if !ok {
		return nil, ErrSecret
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, ErrSecret
	}
	return key, nil
}

// Name is "webhook".
func (s *Sink) Name() string { return Name }

// Format is the sink's format.
func (s *Sink) Format() Format { return s.format }

// Preview is the sink's redacted description for `config check`: the
// scheme and host only (the path and query can carry a token).
func (s *Sink) Preview() string {
	return string(s.format) + " to " + s.url.Scheme + "://" + s.url.Host + "/…"
}

// Send posts m once. Any 2xx answer is success. 408 and 429 are retried,
// any other 3xx or 4xx wraps alerts.ErrPermanent (the receiver refuses
// this body, or moved: retrying the same request cannot succeed); 5xx,
// timeouts, refused and reset connections are retried. Errors name the
// sink and the failure, never the URL.
func (s *Sink) Send(ctx context.Context, m alerts.Message) error {
	body, header, err := s.request(m)
	if err != nil {
		return fmt.Errorf("%s: encode the %s body: %w", Name, s.format, err)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: build the request", Name)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "chalupa-alerts")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %s", Name, sink.Failure(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	return answer(resp.StatusCode)
}

// answer turns an HTTP status into Send's error.
func answer(code int) error {
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return &statusError{code: code}
	}
	return &statusError{code: code, permanent: true}
}

// statusError is a receiver's answer other than 2xx: its status, which
// alerts.HTTPStatus reads for the log, and whether a retry cannot help.
type statusError struct {
	code      int
	permanent bool
}

func (e *statusError) Error() string {
	if e.permanent {
		return fmt.Sprintf("%s: the receiver answered %d: %v", Name, e.code, alerts.ErrPermanent)
	}
	return fmt.Sprintf("%s: the receiver answered %d", Name, e.code)
}

// Unwrap is alerts.ErrPermanent for a status a retry cannot fix.
func (e *statusError) Unwrap() error {
	if e.permanent {
		return alerts.ErrPermanent
	}
	return nil
}

// HTTPStatus is the status the receiver answered.
func (e *statusError) HTTPStatus() int { return e.code }

// request is m's body and headers in the sink's format.
func (s *Sink) request(m alerts.Message) ([]byte, http.Header, error) {
	h := http.Header{}
	switch s.format {
	case Slack:
		b, err := json.Marshal(SlackBody(m))
		h.Set("Content-Type", "application/json")
		return b, h, err
	case Ntfy:
		body, title, prio, tags := NtfyRequest(m)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Title", headerText(title))
		h.Set("Priority", strconv.Itoa(prio))
		h.Set("Tags", strings.Join(tags, ","))
		return []byte(body), h, nil
	}
	b, err := json.Marshal(JSONBody(m))
	if err != nil {
		return nil, nil, err
	}
	h.Set("Content-Type", "application/json")
	ts := s.now()
	h.Set("webhook-id", m.ID)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", Sign(s.key, m.ID, ts, b))
	return b, h, nil
}

// Sign is the Standard Webhooks signature header value of body: "v1,"
// and base64 of HMAC-SHA256 over "ID.UNIX-SECONDS.BODY" with key.
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Body is the JSON format's body, version 1 (docs/operations.md,
// "Alerts", under Sinks). Fields are only ever added within a version.
type Body struct {
	// Version is BodyVersion.
	Version int `json:"version"`
	// ID is the message's stable id, also the webhook-id header: the
	// same on every retry and re-send, so a receiver drops duplicates.
	ID string `json:"id"`
	// AlertID is the alert the message is about; absent for a test
	// message or the digest.
	AlertID string `json:"alertId,omitempty"`
	// Event is fired, repeated, resolved, test or digest.
	Event alerts.Event `json:"event"`
	// Kind is the condition's kind; absent for a test or digest.
	Kind string `json:"kind,omitempty"`
	// Severity is critical, warning or info.
	Severity alerts.Severity `json:"severity"`
	// Subjects are what the message is about (at most 20; never null).
	Subjects []alerts.Subject `json:"subjects"`
	// More counts the subjects left out of a coalesced message.
	More int `json:"more"`
	// Title is one line: what, where and how bad.
	Title string `json:"title"`
	// Text is the plain-text body (at most MaxText bytes).
	Text string `json:"text"`
	// At is when the condition changed, RFC 3339 in UTC.
	At time.Time `json:"at"`
}

// JSONBody is m as the JSON format's body.
func JSONBody(m alerts.Message) Body {
	subj := m.Subjects
	if subj == nil {
		subj = []alerts.Subject{}
	}
	return Body{Version: BodyVersion, ID: m.ID, AlertID: m.AlertID, Event: m.Event, Kind: m.Kind, Severity: m.Severity,
		Subjects: subj, More: m.More, Title: m.Title, Text: cut(m.Text, MaxText), At: m.At.UTC()}
}

// SlackMessage is a Slack incoming-webhook body: the top-level text (the
// notification and the fallback) and one attachment.
type SlackMessage struct {
	Text        string            `json:"text"`
	Attachments []SlackAttachment `json:"attachments"`
}

// SlackAttachment is one of Slack's (secondary) message attachments, the
// fields Mattermost and Discord's /slack endpoint also read.
type SlackAttachment struct {
	Fallback string       `json:"fallback"`
	Color    string       `json:"color"`
	Title    string       `json:"title"`
	Text     string       `json:"text"`
	Fields   []SlackField `json:"fields,omitempty"`
	Footer   string       `json:"footer"`
	TS       int64        `json:"ts"`
}

// SlackField is one of an attachment's fields.
type SlackField struct {
	Title string `json:"title"`
	Value string `json:"value"`
	Short bool   `json:"short"`
}

// severityColour is the attachment's colour bar: red, amber, grey, and
// green for a resolved alert.
func severityColour(m alerts.Message) string {
	switch {
	case m.Event == alerts.Resolved:
		return "#2eb67d"
	case m.Severity == alerts.Critical:
		return "#e01e5a"
	case m.Severity == alerts.Warning:
		return "#ecb22e"
	}
	return "#868686"
}

// SlackBody is m as a Slack incoming-webhook body. Text is escaped as
// Slack asks (&, < and >), so nothing in it becomes a link or a mention.
func SlackBody(m alerts.Message) SlackMessage {
	title := slackEscape(m.Title)
	a := SlackAttachment{Fallback: title, Color: severityColour(m), Title: title, Text: slackEscape(cut(m.Text, MaxText)),
		Footer: "chalupa · " + string(m.Event) + " · " + m.ID, TS: m.At.Unix()}
	if s := sink.SubjectsLine(m); s != "" {
		a.Fields = []SlackField{{Title: "Subjects", Value: slackEscape(s)}}
	}
	return SlackMessage{Text: title, Attachments: []SlackAttachment{a}}
}

// slackEscape escapes the three characters Slack's mrkdwn reads as markup.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Ntfy priorities (ntfy's 1–5 scale).
const (
	ntfyDefault = 3
	ntfyHigh    = 4
	ntfyUrgent  = 5
)

// NtfyRequest is m as an ntfy publish request: the plain-text body (the
// text, the subjects and the message id), its Title, its Priority (5 for
// critical, 4 for warning, 3 for info and for any resolved message) and
// its Tags (an emoji shortcode ntfy shows, the severity, the event and
// the kind).
func NtfyRequest(m alerts.Message) (body, title string, priority int, tags []string) {
	priority, emoji := ntfyDefault, "information_source"
	switch {
	case m.Event == alerts.Resolved:
		emoji = "white_check_mark"
	case m.Severity == alerts.Critical:
		priority, emoji = ntfyUrgent, "rotating_light"
	case m.Severity == alerts.Warning:
		priority, emoji = ntfyHigh, "warning"
	}
	tags = []string{emoji, string(m.Severity), string(m.Event)}
	if m.Kind != "" {
		tags = append(tags, m.Kind)
	}
	var b strings.Builder
	b.WriteString(m.Text)
	if s := sink.SubjectsLine(m); s != "" {
		b.WriteString("\n\nSubjects: " + s)
	}
	b.WriteString("\nMessage " + m.ID)
	return cut(b.String(), MaxNtfyText), m.Title, priority, tags
}

// headerText is s as an HTTP header value: as it is when printable
// ASCII, else RFC 2047 encoded (ntfy decodes it).
func headerText(s string) string {
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return mime.BEncoding.Encode("utf-8", s)
		}
	}
	return s
}

// cut keeps at most n bytes of s, on a rune boundary, marking a cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "\n…(cut)"
	i := n - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}
