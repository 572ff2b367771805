package daemon_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
)

// TestDaemonChecksTokens: the running daemon checks each DigitalOcean
// token it holds with a read-only call (GET /v2/account; no other request
// is made with nothing due): a write token refused at start raises
// do-token-refused on DIGITALOCEAN_WRITE_TOKEN, delivered to a loopback
// webhook receiver, signed; `admin status --check-tokens`'s operation
// answers per variable without a value and lifts the alert once the token
// works; a read token refused on demand raises its own alert, and a
// restart without that token resolves it by the re-check at start. No
// message, answer or log carries a token (docs/operations.md, "Alerts").
func TestDaemonChecksTokens(t *testing.T) {
	const (
		readVar  = "DIGITALOCEAN_READ_TOKEN"
		writeVar = "DIGITALOCEAN_WRITE_TOKEN"
	)
	fake := dofake.New(t)
	readTok, writeTok := fake.AddToken("read", dofake.ReadOnly...), fake.AddToken("write", dofake.FullAccess...)
	got := make(chan []byte, 16)
	var raw bytes.Buffer
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		raw.Write(b) // one handler at a time: the sink sends in order
		if err := verifyHook(r.Header, b); err != nil {
			t.Errorf("webhook signature: %v", err)
		}
		// Answered before the test hears of it, so a restart that
		// follows does not cut the send.
		w.WriteHeader(http.StatusNoContent)
		w.(http.Flusher).Flush()
		got <- b
	}))
	t.Cleanup(rcv.Close)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	hookSecret = webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
	env := map[string]string{
		"CHALUPA_ALERT_WEBHOOK_URL": rcv.URL + "/hooks/T0KEN", "CHALUPA_ALERT_WEBHOOK_SECRET": hookSecret,
		"CHALUPA_DO_API_URL": fake.URL, readVar: readTok, writeVar: writeTok, "CHALUPA_COSTS": "off",
	}
	opt := daemontest.AppOptions{StartLoops: true, Env: env}

	next := func(t *testing.T, want alerts.Event, variable string) webhook.Body {
		t.Helper()
		for {
			var b []byte
			select {
			case b = <-got:
			case <-time.After(3 * time.Minute): // a guard against a hang, not a speed goal
				t.Fatalf("the webhook receiver took no %s message for %s", want, variable)
			}
			var body webhook.Body
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatal(err)
			}
			if body.Kind == alerts.KindDOTokenRefused && body.Event == want && len(body.Subjects) == 1 &&
				body.Subjects[0] == (alerts.Subject{Kind: alerts.SubjectPlatform, ID: variable}) {
				return body
			}
			// At least once: a re-send after a restart is dropped.
		}
	}
	byVar := func(t *testing.T, tc adminapi.TokenChecks) map[string]adminapi.TokenCheck {
		t.Helper()
		out := map[string]adminapi.TokenCheck{}
		for _, c := range tc.Tokens {
			out[c.Variable] = c
		}
		return out
	}

	// The write token is refused at the start's check.
	fake.Inject(dofake.Fault{Route: dofake.RouteGetAccount, Token: "write", Status: 401})
	p := daemontest.NewInProcess(t, opt)
	fired := next(t, alerts.Fired, writeVar)
	if fired.Severity != alerts.Critical || !strings.Contains(fired.Text, writeVar) || !strings.Contains(fired.Text, "401") {
		t.Errorf("fired %+v: want critical, naming the variable and the 401", fired)
	}

	t.Run("check-tokens answers per variable and lifts the write token's alert", func(t *testing.T) {
		tc, err := p.Admin.CheckTokens(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		m := byVar(t, tc)
		if len(m) != 2 || m[readVar].State != "works" || m[writeVar].State != "works" || m[writeVar].CheckedAt == nil {
			t.Fatalf("check-tokens answered %+v, want the read and write tokens working", tc)
		}
		if resolved := next(t, alerts.Resolved, writeVar); resolved.AlertID != fired.AlertID {
			t.Errorf("resolved %+v, want alert %s", resolved, fired.AlertID)
		}
		st, err := p.Admin.GetStatus(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s := byVar(t, adminapi.TokenChecks{Tokens: st.Tokens}); s[writeVar].State != "works" {
			t.Errorf("status tokens %+v", st.Tokens)
		}
	})
	t.Run("a refused read token on demand raises its own alert", func(t *testing.T) {
		fake.Inject(dofake.Fault{Route: dofake.RouteGetAccount, Token: "read", Status: 401, Count: 1000})
		tc, err := p.Admin.CheckTokens(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m := byVar(t, tc); m[readVar].State != "refused" || !strings.Contains(m[readVar].Detail, "401") || m[writeVar].State != "works" {
			t.Fatalf("check-tokens answered %+v, want the read token refused", tc)
		}
		next(t, alerts.Fired, readVar)
	})
	t.Run("a restart without the read token resolves its alert at start", func(t *testing.T) {
		delete(p.Env, readVar) // Restart keeps the configuration it opened with
		p.Restart(opt)
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(p.Logs.String())
			}
		})
		next(t, alerts.Resolved, readVar)
	})
	t.Run("only reads were sent, and nothing carries a token", func(t *testing.T) {
		for _, r := range fake.Requests() {
			if r.Method != http.MethodGet {
				t.Errorf("the daemon sent %s", r)
			}
		}
		for _, tok := range []string{readTok, writeTok} {
			if strings.Contains(raw.String(), tok) || strings.Contains(p.Logs.String(), tok) {
				t.Error("a message or a log line carries a token")
			}
		}
	})
}

// hookSecret is TestDaemonChecksTokens's webhook secret.
var hookSecret string

// verifyHook checks a webhook request's signature with the Standard
// Webhooks reference library.
func verifyHook(h http.Header, body []byte) error {
	v, err := standardwebhooks.NewWebhook(hookSecret)
	if err != nil {
		return err
	}
	return v.Verify(body, h)
}

// TestProvisionTokenCheck: the provision token is checked through the
// converge executor, which alone holds it: refused (401) and then working
// again, per variable, with no other request made with it
// (docs/operations.md, "Alerts").
func TestProvisionTokenCheck(t *testing.T) {
	api := newConvergeAPI(t)
	p := daemontest.NewInProcess(t, daemontest.AppOptions{Env: convergeEnv(t, api, newFakeDroplet(t))})
	api.Inject(dofake.Fault{Route: dofake.RouteGetAccount, Token: "provision", Status: 401})
	for _, want := range []string{"refused", "works"} {
		tc, err := p.Admin.CheckTokens(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(tc.Tokens) != 1 || tc.Tokens[0].Variable != "DIGITALOCEAN_PROVISION_TOKEN" || tc.Tokens[0].State != want {
			t.Fatalf("check-tokens answered %+v, want the provision token %s", tc, want)
		}
		if strings.Contains(tc.Tokens[0].Detail, convergeToken) {
			t.Fatal("the answer carries the provision token")
		}
	}
	for _, r := range api.Requests() {
		if r.Route != dofake.RouteGetAccount {
			t.Errorf("the check sent %s", r)
		}
	}
}
