package webhook_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
)

// token is the part of every test URL a chat webhook would keep secret:
// no error may carry it.
const token = "T0KEN-in-the-path-7f3a9"

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

func message() alerts.Message {
	return alerts.Message{
		ID: "01JCHALUPA0000000000000001", AlertID: "01JALERT00000000000000001", Event: alerts.Fired,
		Kind: "replica-failing", Severity: alerts.Critical,
		Subjects: []alerts.Subject{{Kind: "platform"}, {Kind: "environment", ID: "prod"}}, More: 3,
		Title: "[critical] replica-failing on platform",
		Text:  "The replica has failed for 3m.\nFirst: check CHALUPA_REPLICA_URL's bucket. <!channel> & co",
		At:    time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC),
	}
}

// received is one request a test receiver took.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a local https server that records each request and answers
// code.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []received
	code int
}

func newReceiver(t *testing.T, code int) *receiver {
	t.Helper()
	r := &receiver{code: code}
	r.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{req.Header.Clone(), b})
		code := r.code
		r.mu.Unlock()
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/moved")
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func (r *receiver) url() string { return r.URL + "/hooks/" + token }

func newSink(t *testing.T, c webhook.Config) *webhook.Sink {
	t.Helper()
	s, err := webhook.New(c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// TestJSONSignedAsStandardWebhooks: the json format's body is the
// documented version 1 with every field, and a receiver using the
// Standard Webhooks reference library verifies its signature with the
// whsec_ secret; a re-send carries the same webhook-id.
func TestJSONSignedAsStandardWebhooks(t *testing.T) {
	rcv := newReceiver(t, http.StatusNoContent)
	secret := newSecret(t)
	s := newSink(t, webhook.Config{URL: rcv.url(), Secret: secret, Client: rcv.Client()})
	m := message()
	for range 2 {
		if err := s.Send(context.Background(), m); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	got := rcv.requests()
	if len(got) != 2 {
		t.Fatalf("the receiver took %d requests, want 2", len(got))
	}
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := standardwebhooks.NewWebhook(newSecret(t))
	for i, r := range got {
		if err := verifier.Verify(r.body, r.header); err != nil {
			t.Errorf("request %d: the reference library refuses the signature: %v", i, err)
		}
		if err := other.Verify(r.body, r.header); err == nil {
			t.Errorf("request %d: a different secret verifies the signature", i)
		}
		if id := r.header.Get("webhook-id"); id != m.ID {
			t.Errorf("request %d: webhook-id = %q, want the message id %q", i, id, m.ID)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("request %d: Content-Type = %q", i, ct)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(got[0].body, &body); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	want := map[string]any{
		"version": 1.0, "id": m.ID, "alertId": m.AlertID, "event": "fired", "kind": "replica-failing", "severity": "critical",
		"more": 3.0, "title": m.Title, "text": m.Text, "at": "2026-12-06T08:00:00Z",
	}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("body[%q] = %#v, want %#v", k, body[k], v)
		}
	}
	subj, _ := json.Marshal(body["subjects"])
	if string(subj) != `[{"kind":"platform"},{"id":"prod","kind":"environment"}]` {
		t.Errorf("body.subjects = %s", subj)
	}
}

// TestSlackShape: the slack format is an incoming-webhook body with the
// fields Slack documents for text and a legacy attachment (fallback,
// color, title, text, fields, footer, ts), with Slack's three markup
// characters escaped; it carries no signature headers.
func TestSlackShape(t *testing.T) {
	rcv := newReceiver(t, http.StatusOK)
	s := newSink(t, webhook.Config{URL: rcv.url(), Format: webhook.Slack, Client: rcv.Client()})
	m := message()
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r := rcv.requests()[0]
	if r.header.Get("webhook-signature") != "" {
		t.Error("a slack body carries a webhook-signature")
	}
	var body struct {
		Text        *string `json:"text"`
		Attachments []struct {
			Fallback, Color, Title, Text, Footer *string
			Fields                               []struct {
				Title, Value *string
				Short        *bool
			}
			TS *float64
		}
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	if body.Text == nil || *body.Text != m.Title {
		t.Fatalf("text = %v, want the title", body.Text)
	}
	if len(body.Attachments) != 1 {
		t.Fatalf("%d attachments, want 1", len(body.Attachments))
	}
	a := body.Attachments[0]
	for name, p := range map[string]*string{"fallback": a.Fallback, "color": a.Color, "title": a.Title, "text": a.Text, "footer": a.Footer} {
		if p == nil || *p == "" {
			t.Errorf("attachment has no %s", name)
		}
	}
	if a.Color != nil && !regexp.MustCompile(`^#[0-9a-f]{6}$`).MatchString(*a.Color) {
		t.Errorf("color = %q, want a hex colour", *a.Color)
	}
	if a.TS == nil || int64(*a.TS) != m.At.Unix() {
		t.Errorf("ts = %v, want %d", a.TS, m.At.Unix())
	}
	if a.Text != nil && (strings.Contains(*a.Text, "<!channel>") || !strings.Contains(*a.Text, "&lt;!channel&gt; &amp; co")) {
		t.Errorf("text is not escaped as Slack asks: %q", *a.Text)
	}
	if len(a.Fields) != 1 || a.Fields[0].Value == nil || *a.Fields[0].Value != "platform, environment prod and 3 more" || a.Fields[0].Short == nil {
		t.Errorf("fields = %s", mustJSON(a.Fields))
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestNtfyShape: the ntfy format is a plain-text body with the Title,
// Priority (1–5) and Tags headers ntfy documents: urgent for critical,
// high for warning, default for a resolved alert.
func TestNtfyShape(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*alerts.Message)
		priority int
		tag      string
	}{
		{"critical", func(*alerts.Message) {}, 5, "rotating_light"},
		{"warning", func(m *alerts.Message) { m.Severity = alerts.Warning }, 4, "warning"},
		{"resolved", func(m *alerts.Message) { m.Event = alerts.Resolved }, 3, "white_check_mark"},
		{"non-ascii title", func(m *alerts.Message) { m.Title = "[critical] disk-low — 2 % free" }, 5, "rotating_light"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newReceiver(t, http.StatusOK)
			s := newSink(t, webhook.Config{URL: rcv.url(), Format: webhook.Ntfy, Client: rcv.Client()})
			m := message()
			tc.edit(&m)
			if err := s.Send(context.Background(), m); err != nil {
				t.Fatalf("Send: %v", err)
			}
			r := rcv.requests()[0]
			if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type = %q, want text/plain", ct)
			}
			title, err := new(mime.WordDecoder).DecodeHeader(r.header.Get("Title"))
			if err != nil || title != m.Title {
				t.Errorf("Title = %q (%v), want %q", r.header.Get("Title"), err, m.Title)
			}
			if p, err := strconv.Atoi(r.header.Get("Priority")); err != nil || p != tc.priority {
				t.Errorf("Priority = %q, want %d", r.header.Get("Priority"), tc.priority)
			}
			tags := strings.Split(r.header.Get("Tags"), ",")
			if tags[0] != tc.tag || !contains(tags, string(m.Severity)) || !contains(tags, m.Kind) {
				t.Errorf("Tags = %q", r.header.Get("Tags"))
			}
			body := string(r.body)
			if !strings.HasPrefix(body, m.Text) || !strings.Contains(body, "Subjects: platform, environment prod and 3 more") || !strings.Contains(body, m.ID) {
				t.Errorf("body = %q", body)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestAnswers: 2xx is delivered; 408, 429 and 5xx are retried; any other
// 3xx or 4xx wraps alerts.ErrPermanent. No error carries the URL.
func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		code      int
		ok, perm  bool
		redirects bool
	}{
		{200, true, false, false}, {202, true, false, false}, {204, true, false, false},
		{400, false, true, false}, {401, false, true, false}, {404, false, true, false}, {410, false, true, false}, {413, false, true, false},
		{408, false, false, false}, {429, false, false, false},
		{500, false, false, false}, {502, false, false, false}, {503, false, false, false},
		{302, false, true, true},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			rcv := newReceiver(t, tc.code)
			s := newSink(t, webhook.Config{URL: rcv.url(), Secret: newSecret(t), Client: rcv.Client()})
			err := s.Send(context.Background(), message())
			switch {
			case tc.ok && err != nil:
				t.Fatalf("Send: %v, want delivered", err)
			case tc.ok:
				return
			case err == nil:
				t.Fatal("Send: nil, want an error")
			case errors.Is(err, alerts.ErrPermanent) != tc.perm:
				t.Errorf("Send: %v; permanent = %v, want %v", err, errors.Is(err, alerts.ErrPermanent), tc.perm)
			}
			noURL(t, err, rcv.url())
			if n := len(rcv.requests()); n != 1 {
				t.Errorf("the receiver took %d requests, want 1 (no redirect followed)", n)
			}
		})
	}
}

// noURL fails when err carries any part of the webhook URL.
func noURL(t *testing.T, err error, u string) {
	t.Helper()
	host := strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://")
	host, _, _ = strings.Cut(host, "/")
	for _, part := range []string{token, host} {
		if strings.Contains(err.Error(), part) {
			t.Errorf("the error %q carries the URL's %q", err, part)
		}
	}
	if !strings.HasPrefix(err.Error(), "webhook: ") {
		t.Errorf("the error %q does not name the sink", err)
	}
}

// TestTransportFailuresRetried: a receiver that does not answer in time,
// one that resets the connection and one that refuses it are retryable
// failures naming the sink and the kind of failure, never the URL.
func TestTransportFailuresRetried(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		client := srv.Client()
		client.Timeout = 200 * time.Millisecond
		s := newSink(t, webhook.Config{URL: srv.URL + "/hooks/" + token, Secret: newSecret(t), Client: client})
		err := s.Send(context.Background(), message())
		retryable(t, err, "timed out", srv.URL)
	})
	t.Run("context deadline", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		s := newSink(t, webhook.Config{URL: srv.URL + "/hooks/" + token, Secret: newSecret(t), Client: srv.Client()})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		retryable(t, s.Send(ctx, message()), "timed out", srv.URL)
	})
	t.Run("reset", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				// Read the request, then reset: SO_LINGER 0 sends RST.
				_, _ = c.Read(make([]byte, 4096))
				_ = c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}()
		u := "http://" + ln.Addr().String() + "/hooks/" + token
		s := newSink(t, webhook.Config{URL: u, Secret: newSecret(t)})
		retryable(t, s.Send(context.Background(), message()), "connection reset", u)
	})
	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		u := "http://" + addr + "/hooks/" + token
		s := newSink(t, webhook.Config{URL: u, Secret: newSecret(t)})
		retryable(t, s.Send(context.Background(), message()), "connection refused", u)
	})
}

func retryable(t *testing.T, err error, want, u string) {
	t.Helper()
	if err == nil {
		t.Fatal("Send: nil, want an error")
	}
	if errors.Is(err, alerts.ErrPermanent) {
		t.Errorf("Send: %v is permanent, want retryable", err)
	}
	if err.Error() != "webhook: "+want {
		t.Errorf("Send: %q, want %q", err, "webhook: "+want)
	}
	noURL(t, err, u)
}

// TestNewRefuses: New refuses a URL that is not https off loopback, an
// unknown format, a json sink without a valid whsec_ secret and a secret
// with an unsigned format; no refusal repeats the URL or the secret.
func TestNewRefuses(t *testing.T) {
	good := newSecret(t)
	short := webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("too short"))
	for _, tc := range []struct {
		name string
		c    webhook.Config
		want error
	}{
		{"http off loopback", webhook.Config{URL: "http://hooks.example.com/" + token, Secret: good}, webhook.ErrURL},
		{"not http", webhook.Config{URL: "ftp://hooks.example.com/" + token, Secret: good}, webhook.ErrURL},
		{"relative", webhook.Config{URL: "/hooks/" + token, Secret: good}, webhook.ErrURL},
		{"unknown format", webhook.Config{URL: "https://hooks.example.com/" + token, Format: "teams", Secret: good}, webhook.ErrFormat},
		{"json without secret", webhook.Config{URL: "https://hooks.example.com/" + token}, webhook.ErrSecret},
		{"secret without prefix", webhook.Config{URL: "https://hooks.example.com/" + token, Secret: strings.TrimPrefix(good, "whsec_")}, webhook.ErrSecret},
		{"secret too short", webhook.Config{URL: "https://hooks.example.com/" + token, Secret: short}, webhook.ErrSecret},
		{"secret with slack", webhook.Config{URL: "https://hooks.example.com/" + token, Format: webhook.Slack, Secret: good}, webhook.ErrSecretUnused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := webhook.New(tc.c)
			if !errors.Is(err, tc.want) {
				t.Fatalf("New: %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), strings.TrimPrefix(good, "whsec_")) {
				t.Errorf("the refusal %q repeats the URL or the secret", err)
			}
		})
	}
	for _, ok := range []webhook.Config{
		{URL: "https://hooks.example.com/" + token, Secret: good},
		{URL: "http://127.0.0.1:9999/" + token, Secret: good},
		{URL: "http://localhost/" + token, Format: webhook.Ntfy},
		{URL: "https://discord.com/api/webhooks/1/" + token + "/slack", Format: webhook.Slack},
	} {
		if _, err := webhook.New(ok); err != nil {
			t.Errorf("New refuses a good configuration: %v", err)
		}
	}
}

// TestPreview: the preview shows the format, scheme and host, never the
// path or query.
func TestPreview(t *testing.T) {
	s := newSink(t, webhook.Config{URL: "https://ntfy.example.com/alerts-" + token + "?auth=" + token, Format: webhook.Ntfy})
	if got, want := s.Preview(), "ntfy to https://ntfy.example.com/…"; got != want {
		t.Errorf("Preview = %q, want %q", got, want)
	}
}
