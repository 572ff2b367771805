package reaper_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alertstest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/digitalocean/tokencheck"
	"github.com/chalupa-run/chalupa/reaper"
)

// TestWriteTokenCheck: the reaper checks its own write token with one
// read-only call (GET /v2/account through its client, never a write): a
// 401 raises do-token-refused on the platform subject named by the
// token's variable, once however many checks see it; the next answer lifts
// it; a 403 (a token without account:read) and a network fault are not a
// refusal; the condition's detail never carries the token
// (docs/operations.md, "Alerts").
func TestWriteTokenCheck(t *testing.T) {
	const variable = "DIGITALOCEAN_WRITE_TOKEN"
	ctx := context.Background()
	subject := alerts.Subject{Kind: alerts.SubjectPlatform, ID: variable}
	set := &alertstest.Recorder{}
	f := newFixture(t, func(c *reaper.Config) { c.Alerts = set; c.TokenVariable = variable })
	tc := f.r.TokenCheck()
	if tc == nil {
		t.Fatal("a reaper with a write token and its variable has no token check")
	}

	check := func(t *testing.T, want string, wantReports ...bool) {
		t.Helper()
		if got := tc.Check(ctx); got.State != want || got.Variable != variable {
			t.Fatalf("check: %+v, want state %s", got, want)
		}
		if got := set.Holds(alerts.KindDOTokenRefused); !slices.Equal(got, wantReports) {
			t.Fatalf("do-token-refused reports %v, want %v", got, wantReports)
		}
	}
	t.Run("works: reported not holding, so an alert left open resolves", func(t *testing.T) {
		check(t, tokencheck.Works, false)
	})
	t.Run("refused (401): raised once on the variable", func(t *testing.T) {
		f.fake.Inject(dofake.Fault{Route: dofake.RouteGetAccount, Token: "write", Status: 401, Count: 2})
		check(t, tokencheck.Refused, false, true)
		check(t, tokencheck.Refused, false, true)
		got := set.Raised()
		last := got[len(got)-1]
		if last.Subject != subject || !strings.Contains(last.Detail, variable) || !strings.Contains(last.Detail, "401") {
			t.Errorf("raised %+v, want subject %v and a detail naming the variable and the status", last, subject)
		}
	})
	t.Run("a network fault is unreachable, not a refusal: nothing reported", func(t *testing.T) {
		f.fake.Inject(dofake.Fault{Route: dofake.RouteGetAccount, Token: "write", Status: 503})
		check(t, tokencheck.Unreachable, false, true)
	})
	t.Run("works again: lifted", func(t *testing.T) {
		check(t, tokencheck.Works, false, true, false)
	})
	t.Run("403 (no account:read) is not a refusal", func(t *testing.T) {
		f.fake.Inject(dofake.Fault{Route: dofake.RouteGetAccount, Token: "write", Status: 403})
		check(t, tokencheck.Works, false, true, false)
	})
	t.Run("only reads were sent, and no report holds the token", func(t *testing.T) {
		for _, r := range f.fake.Requests() {
			if r.Method != "GET" || r.Route != dofake.RouteGetAccount {
				t.Errorf("a token check sent %s", r)
			}
		}
		for _, c := range set.Calls() {
			if strings.Contains(c.Detail, "dop_v1_") {
				t.Errorf("a report carries a token: %q", c.Detail)
			}
		}
	})
	t.Run("checked at most hourly on its own", func(t *testing.T) {
		n := len(f.fake.Requests())
		tc.CheckDue(ctx)
		if got := len(f.fake.Requests()); got != n {
			t.Errorf("CheckDue within the hour called DigitalOcean (%d requests, was %d)", got, n)
		}
		f.clock.Advance(tokencheck.Interval)
		tc.CheckDue(ctx)
		if got := len(f.fake.Requests()); got != n+1 {
			t.Errorf("CheckDue after an hour made %d calls, want 1", got-n)
		}
	})
	t.Run("no variable, no check", func(t *testing.T) {
		if f.newReaper().TokenCheck() != nil {
			t.Error("a reaper without TokenVariable checks its token")
		}
	})
}
