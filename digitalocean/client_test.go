package digitalocean_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
)

// sentinel is a token value searched for in everything the client can
// print; each test client's token is sentinel + its label.
const sentinel = "dop_v1_SENTINEL7f3a9c"

var epoch = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// syncBuf is a log sink safe for concurrent writers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type env struct {
	s     *dofake.Server
	clock *clockwork.FakeClock
	logs  *syncBuf
}

func newEnv(t *testing.T, opts ...dofake.Option) *env {
	clock := clockwork.NewFakeClockAt(epoch)
	return &env{s: dofake.New(t, append([]dofake.Option{dofake.WithClock(clock)}, opts...)...), clock: clock, logs: &syncBuf{}}
}

// client registers a token with scopes under label and returns a client
// for it. A nil scopes leaves the token unknown to the server.
func (e *env) client(t *testing.T, label string, scopes []dofake.Scope, tweak ...func(*digitalocean.Config)) *digitalocean.Client {
	t.Helper()
	tok := sentinel + label
	if scopes != nil {
		e.s.AddTokenValue(label, tok, scopes...)
	}
	cfg := digitalocean.Config{BaseURL: e.s.URL, Token: digitalocean.Token(tok), Label: label, Version: "1.2.3",
		Clock: e.clock, Logger: zerolog.New(e.logs)}
	for _, f := range tweak {
		f(&cfg)
	}
	c, err := digitalocean.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckBaseURL(t *testing.T) {
	ok := map[string]string{
		"":                              digitalocean.DefaultBaseURL,
		"https://api.digitalocean.com":  "https://api.digitalocean.com/",
		"https://api.digitalocean.com/": "https://api.digitalocean.com/",
		"http://127.0.0.1:8089":         "http://127.0.0.1:8089/",
		"http://localhost:1/":           "http://localhost:1/",
		"http://[::1]:9":                "http://[::1]:9/",
		"https://do-proxy.example:8443": "https://do-proxy.example:8443/",
	}
	for in, want := range ok {
		t.Run("ok "+in, func(t *testing.T) {
			got, err := digitalocean.CheckBaseURL(in)
			if err != nil || got != want {
				t.Errorf("CheckBaseURL(%q) = %q, %v; want %q", in, got, err, want)
			}
		})
	}
	bad := map[string]string{
		"http://api.digitalocean.com/":           "https unless",
		"http://10.0.0.1/":                       "https unless",
		"https://user:hunter2@api.example/":      "user info",
		"https://api.digitalocean.com/v2":        "no path",
		"https://api.digitalocean.com/?token=x":  "no path",
		"https://api.digitalocean.com/#frag":     "no path",
		"ftp://api.digitalocean.com/":            "absolute http(s)",
		"api.digitalocean.com":                   "absolute http(s)",
		"https:///v2":                            "absolute http(s)",
		"https://api.digitalocean.com:badport/":  "absolute http(s)",
		"mailto:ops@example.com":                 "absolute http(s)",
		"https://api.digitalocean.com/?":         "no path",
		"https://api.digitalocean.com/secret123": "no path",
	}
	for in, want := range bad {
		t.Run("bad "+in, func(t *testing.T) {
			_, err := digitalocean.CheckBaseURL(in)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("CheckBaseURL(%q) = %v, want an error containing %q", in, err, want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "secret123") {
				t.Errorf("the error repeats the URL: %v", err)
			}
		})
	}
	if _, err := digitalocean.New(digitalocean.Config{BaseURL: "http://api.example/", Token: "t", Label: "read"}); err == nil ||
		!strings.Contains(err.Error(), digitalocean.EnvBaseURL) {
		t.Errorf("New with a plain-http remote URL: %v", err)
	}
	for name, cfg := range map[string]digitalocean.Config{"no token": {Label: "read"}, "no label": {Token: "t"}} {
		if _, err := digitalocean.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// kind names the sentinel an error wraps.
func kind(err error) string {
	for _, k := range []error{digitalocean.ErrUnauthorized, digitalocean.ErrForbidden, digitalocean.ErrNotFound, digitalocean.ErrRateLimited, digitalocean.ErrProvider, digitalocean.ErrBadArgument} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	if err == nil {
		return "ok"
	}
	return "unclassified: " + err.Error()
}

// TestEveryCallAndStatusClass drives each client method against the test
// server through each outcome: success, 401, 403, 404, 429, 5xx.
func TestEveryCallAndStatusClass(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	write := e.client(t, "write", dofake.FullAccess)
	read := e.client(t, "read", dofake.ReadOnly)
	cust := e.client(t, "customer", dofake.CustomerScopes)
	stranger := e.client(t, "stranger", nil)                 // unknown to the server
	limited := e.client(t, "limited", dofake.CustomerScopes) // a 429 blocks its client: a client of its own
	d := e.s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo"), Size: "s-2vcpu-4gb", Region: "fra1"})
	e.s.AddVolume(dofake.Volume{Tags: dofake.EnvTags("demo"), SizeGiB: 50})
	e.s.AddVolume(dofake.Volume{Tags: dofake.NoTags, SizeGiB: 70})

	type call func(*digitalocean.Client) error
	get := func(id int) call {
		return func(c *digitalocean.Client) error { _, err := c.GetDroplet(ctx, id); return err }
	}
	list := func(c *digitalocean.Client) error {
		_, err := c.ListDropletsByTag(ctx, digitalocean.EnvTag("demo"))
		return err
	}
	vols := func(c *digitalocean.Client) error {
		_, err := c.ListVolumesByTag(ctx, digitalocean.EnvTag("demo"))
		return err
	}
	sizes := func(c *digitalocean.Client) error { _, err := c.Sizes(ctx); return err }
	account := func(c *digitalocean.Client) error { _, err := c.Account(ctx); return err }

	for _, tc := range []struct {
		name   string
		client *digitalocean.Client
		fault  *dofake.Fault
		call   call
		want   error
		status int
	}{
		{"get ok", read, nil, get(d.ID), nil, 0},
		{"get 404", read, nil, get(d.ID + 999), digitalocean.ErrNotFound, 404},
		{"get 401", stranger, nil, get(d.ID), digitalocean.ErrUnauthorized, 401},
		{"get 500", read, &dofake.Fault{Route: dofake.RouteGetDroplet, Status: 500}, get(d.ID), digitalocean.ErrProvider, 500},
		{"get 503", read, &dofake.Fault{Route: dofake.RouteGetDroplet, Status: 503}, get(d.ID), digitalocean.ErrProvider, 503},
		{"get 429", limited, &dofake.Fault{Route: dofake.RouteGetDroplet, Status: 429}, get(d.ID), digitalocean.ErrRateLimited, 429},
		{"get 422 is a provider error", read, &dofake.Fault{Route: dofake.RouteGetDroplet, Status: 422}, get(d.ID), digitalocean.ErrProvider, 422},
		{"list ok", cust, nil, list, nil, 0},
		{"list 401", stranger, nil, list, digitalocean.ErrUnauthorized, 401},
		{"list 500", read, &dofake.Fault{Route: dofake.RouteListDroplets, Status: 500}, list, digitalocean.ErrProvider, 500},
		{"volumes ok", read, nil, vols, nil, 0},
		{"volumes 403 for a customer token", cust, nil, vols, digitalocean.ErrForbidden, 403},
		{"sizes ok", read, nil, sizes, nil, 0},
		{"sizes 401", stranger, nil, sizes, digitalocean.ErrUnauthorized, 401},
		{"account ok", read, nil, account, nil, 0},
		{"account 403 for a customer token", cust, nil, account, digitalocean.ErrForbidden, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fault != nil {
				f := *tc.fault
				f.Token = tc.client.Label()
				e.s.Inject(f)
			}
			err := tc.call(tc.client)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v (%s), want %v", err, kind(err), tc.want)
			}
			var de *digitalocean.Error
			if err != nil && (!errors.As(err, &de) || de.Status != tc.status || de.Token != tc.client.Label() || de.Op == "") {
				t.Errorf("error = %#v, want status %d", de, tc.status)
			}
			// Every error is exactly one of the sentinels.
			n := 0
			for _, k := range []error{digitalocean.ErrUnauthorized, digitalocean.ErrForbidden, digitalocean.ErrNotFound, digitalocean.ErrRateLimited, digitalocean.ErrProvider} {
				if errors.Is(err, k) {
					n++
				}
			}
			if err != nil && n != 1 {
				t.Errorf("%v matches %d sentinels", err, n)
			}
		})
	}

	t.Run("get fills the droplet", func(t *testing.T) {
		got, err := read.GetDroplet(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != d.ID || got.Region != "fra1" || got.SizeSlug != "s-2vcpu-4gb" || got.PriceHourly != 0.03571 ||
			got.PriceMonthly != 24 || got.VCPUs != 2 || !got.HasTag("chalupa:env:demo") || !got.CreatedAt.Equal(epoch) || got.Status != "active" {
			t.Errorf("droplet = %+v", got)
		}
	})
	t.Run("volumes filtered by tag", func(t *testing.T) {
		vs, err := read.ListVolumesByTag(ctx, digitalocean.EnvTag("demo"))
		if err != nil || len(vs) != 1 || vs[0].SizeGiB != 50 || vs[0].Region != "nyc3" {
			t.Errorf("volumes = %+v, %v", vs, err)
		}
	})
	t.Run("account", func(t *testing.T) {
		a, err := read.Account(ctx)
		if err != nil || a.UUID == "" || a.Status != "active" || a.TeamName != "chalupa" || a.DropletLimit != 25 {
			t.Errorf("account = %+v, %v", a, err)
		}
	})
	t.Run("delete", func(t *testing.T) {
		victim := e.s.AddDroplet(dofake.Droplet{})
		e.s.ResetRequests()
		if r, err := read.DeleteDroplet(ctx, victim.ID); !errors.Is(err, digitalocean.ErrForbidden) || r != digitalocean.DeleteFailed {
			t.Errorf("read token: %v %v", r, err)
		}
		e.s.Inject(dofake.Fault{Route: dofake.RouteDeleteDroplet, Status: 500})
		if r, err := write.DeleteDroplet(ctx, victim.ID); !errors.Is(err, digitalocean.ErrProvider) || r != digitalocean.DeleteFailed {
			t.Errorf("500: %v %v", r, err)
		}
		if _, ok := e.s.Droplet(victim.ID); !ok {
			t.Fatal("a refused delete deleted")
		}
		if r, err := write.DeleteDroplet(ctx, victim.ID); err != nil || r != digitalocean.Deleted {
			t.Errorf("delete: %v %v", r, err)
		}
		if r, err := write.DeleteDroplet(ctx, victim.ID); err != nil || r != digitalocean.DeleteAlreadyGone {
			t.Errorf("delete again: %v %v", r, err)
		}
		if r, err := stranger.DeleteDroplet(ctx, victim.ID); !errors.Is(err, digitalocean.ErrUnauthorized) || r != digitalocean.DeleteFailed {
			t.Errorf("unknown token: %v %v", r, err)
		}
		// Exactly which DELETEs went out, with which token.
		var got []string
		for _, r := range e.s.Deletes() {
			got = append(got, r.String())
		}
		path := fmt.Sprintf("DELETE /v2/droplets/%d", victim.ID)
		want := []string{path + " token=read → 403", path + " token=write → 500", path + " token=write → 204",
			path + " token=write → 404", path + " token=(unknown) → 401"}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("deletes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("bad arguments send nothing and are not 'not found'", func(t *testing.T) {
		e.s.ResetRequests()
		if r, err := write.DeleteDroplet(ctx, 0); !errors.Is(err, digitalocean.ErrBadArgument) || errors.Is(err, digitalocean.ErrNotFound) || r != digitalocean.DeleteFailed {
			t.Errorf("delete 0: %v %v", r, err)
		}
		if _, err := write.GetDroplet(ctx, -1); !errors.Is(err, digitalocean.ErrBadArgument) {
			t.Errorf("get -1: %v", err)
		}
		for _, tag := range []string{"", "chalupa env", "a&tag_name=b", strings.Repeat("x", 256)} {
			if _, err := write.ListDropletsByTag(ctx, tag); !errors.Is(err, digitalocean.ErrBadArgument) {
				t.Errorf("tag %q: %v", tag, err)
			}
		}
		if n := len(e.s.Requests()); n != 0 {
			t.Errorf("%d requests sent", n)
		}
	})
}

// TestListAcrossPages: a tag listing of 450 droplets is three requests of
// 200 and sees every droplet once; other tags are not listed.
func TestListAcrossPages(t *testing.T) {
	e := newEnv(t)
	c := e.client(t, "read", dofake.ReadOnly)
	want := map[int]bool{}
	for i := 0; i < 450; i++ {
		want[e.s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("big")}).ID] = true
	}
	for i := 0; i < 30; i++ {
		e.s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("small")})
	}
	ds, err := c.ListDropletsByTag(context.Background(), digitalocean.EnvTag("big"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, d := range ds {
		if !want[d.ID] || seen[d.ID] {
			t.Errorf("droplet %d unexpected or repeated", d.ID)
		}
		seen[d.ID] = true
	}
	if len(seen) != 450 {
		t.Errorf("listed %d, want 450", len(seen))
	}
	var pages []string
	for _, r := range e.s.Requests(dofake.OnRoute(dofake.RouteListDroplets)) {
		pages = append(pages, r.Query)
	}
	wantPages := []string{
		"page=1&per_page=200&tag_name=chalupa%3Aenv%3Abig",
		"page=2&per_page=200&tag_name=chalupa%3Aenv%3Abig",
		"page=3&per_page=200&tag_name=chalupa%3Aenv%3Abig",
	}
	if strings.Join(pages, " ") != strings.Join(wantPages, " ") {
		t.Errorf("requests = %v", pages)
	}
	// A failure on page 2 fails the whole listing: no partial inventory.
	e.s.Inject(dofake.Fault{Route: dofake.RouteListDroplets, Status: 500, Count: 1})
	if _, err := c.ListDropletsByTag(context.Background(), digitalocean.EnvTag("small")); !errors.Is(err, digitalocean.ErrProvider) {
		t.Errorf("failed page: %v", err)
	}
}

// TestSizesCache: Sizes asks the API once per TTL; a price change shows
// after the TTL.
func TestSizesCache(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := e.client(t, "read", dofake.ReadOnly, func(cfg *digitalocean.Config) { cfg.SizesTTL = 10 * time.Minute })
	price := func() float64 {
		sizes, err := c.Sizes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sizes {
			if s.Slug == "s-1vcpu-1gb" {
				return s.PriceHourly
			}
		}
		t.Fatal("s-1vcpu-1gb missing")
		return 0
	}
	if p := price(); p != 0.00893 {
		t.Errorf("price %v", p)
	}
	e.s.SetSize(dofake.Size{Slug: "s-1vcpu-1gb", VCPUs: 1, MemoryMiB: 1024, DiskGiB: 25, PriceHourly: 0.01, PriceMonthly: 6.72})
	e.clock.Advance(9 * time.Minute)
	if p := price(); p != 0.00893 {
		t.Errorf("within the TTL: price %v", p)
	}
	e.clock.Advance(time.Minute)
	if p := price(); p != 0.01 {
		t.Errorf("after the TTL: price %v", p)
	}
	if n := len(e.s.Requests(dofake.OnRoute(dofake.RouteListSizes))); n != 2 {
		t.Errorf("%d sizes requests, want 2", n)
	}
}

// TestUserAgentAndToken: every request names chalupa and its version, and
// carries the bearer token, and only to the API's host.
func TestUserAgentAndToken(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var uas, auths []string
	capture := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		uas, auths = append(uas, r.Header.Get("User-Agent")), append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	})
	c := e.client(t, "read", dofake.ReadOnly, func(cfg *digitalocean.Config) { cfg.Transport = capture })
	if _, err := c.Account(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(uas) != 1 || !strings.HasPrefix(uas[0], "chalupa/1.2.3 godo/") {
		t.Errorf("User-Agent = %q", uas)
	}
	if auths[0] != "Bearer "+sentinel+"read" {
		t.Error("the bearer token was not sent")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRateLimitTracking: the hourly budget follows the RateLimit-* headers;
// the minute budget is counted locally.
func TestRateLimitTracking(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, dofake.WithRateLimits(0, 40))
	c := e.client(t, "read", dofake.ReadOnly)
	if b := c.Budget(); b.HourKnown || b.MinuteLimit != digitalocean.MinuteBudget || b.Token != "read" {
		t.Errorf("fresh budget = %+v", b)
	}
	for i := 0; i < 3; i++ {
		if _, err := c.Account(ctx); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10 * time.Second)
	}
	b := c.Budget()
	if !b.HourKnown || b.HourLimit != 40 || b.HourRemaining != 37 || !b.HourReset.Equal(epoch.Add(time.Hour)) ||
		b.MinuteUsed != 3 || b.Requests != 3 || b.RateLimited != 0 {
		t.Errorf("budget = %+v", b)
	}
	e.clock.Advance(35 * time.Second)
	if b := c.Budget(); b.MinuteUsed != 2 {
		t.Errorf("minute window at 65 s: %d used, want 2 (the requests of 10 s and 20 s)", b.MinuteUsed)
	}
}

// TestHourBudgetHeldBack: once the headers say the hour is spent, calls are
// refused without a request until RateLimit-Reset.
func TestHourBudgetHeldBack(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, dofake.WithRateLimits(0, 3))
	c := e.client(t, "read", dofake.ReadOnly)
	for i := 0; i < 3; i++ {
		if _, err := c.Account(ctx); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
	}
	for i := 0; i < 100; i++ {
		_, err := c.Account(ctx)
		if at, ok := digitalocean.RetryAt(err); !ok || !at.Equal(epoch.Add(time.Hour)) {
			t.Fatalf("call %d: %v (retry at %v)", i, err, at)
		}
	}
	if n := len(e.s.Requests()); n != 3 {
		t.Errorf("%d requests reached the API, want 3", n)
	}
	if b := c.Budget(); b.HeldBack != 100 || b.RateLimited != 0 {
		t.Errorf("budget = %+v", b)
	}
	e.clock.Advance(epoch.Add(time.Hour + time.Second).Sub(e.clock.Now()))
	if _, err := c.Account(ctx); err != nil {
		t.Errorf("after the reset: %v", err)
	}
}

// TestMinuteBudgetHeldBack: the 251st request within a minute is held back
// locally (no header reports that budget) until the first leaves the
// window; the API never sees it.
func TestMinuteBudgetHeldBack(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := e.client(t, "read", dofake.ReadOnly)
	for i := 0; i < digitalocean.MinuteBudget; i++ {
		if _, err := c.Account(ctx); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	e.clock.Advance(30 * time.Second)
	_, err := c.Account(ctx)
	if at, ok := digitalocean.RetryAt(err); !ok || !at.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("251st: %v, retry at %v", err, at)
	}
	if n := len(e.s.Requests()); n != digitalocean.MinuteBudget {
		t.Errorf("%d requests reached the API", n)
	}
	e.clock.Advance(30 * time.Second)
	if _, err := c.Account(ctx); err != nil {
		t.Errorf("after the minute: %v", err)
	}
}

// Test429BacksOff: a 429 blocks the client until Retry-After; calls in the
// meantime send nothing (no tight loop), and the first call after goes
// through.
func Test429BacksOff(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := e.client(t, "write", dofake.FullAccess)
	d := e.s.AddDroplet(dofake.Droplet{})
	e.s.Inject(dofake.Fault{Route: dofake.RouteDeleteDroplet, Status: 429, RetryAfter: 30 * time.Second})
	r, err := c.DeleteDroplet(ctx, d.ID)
	at, ok := digitalocean.RetryAt(err)
	if r != digitalocean.DeleteFailed || !ok || !at.Equal(epoch.Add(30*time.Second)) {
		t.Fatalf("429: %v %v, retry at %v", r, err, at)
	}
	var de *digitalocean.Error
	if !errors.As(err, &de) || de.Status != 429 {
		t.Errorf("error = %#v", de)
	}
	for i := 0; i < 1000; i++ {
		if _, err := c.GetDroplet(ctx, d.ID); !errors.Is(err, digitalocean.ErrRateLimited) {
			t.Fatalf("while blocked: %v", err)
		}
	}
	e.clock.Advance(29 * time.Second)
	if _, err := c.DeleteDroplet(ctx, d.ID); !errors.Is(err, digitalocean.ErrRateLimited) {
		t.Errorf("one second early: %v", err)
	}
	if n := len(e.s.Requests()); n != 1 {
		t.Errorf("%d requests while blocked, want only the first", n)
	}
	e.clock.Advance(time.Second)
	if r, err := c.DeleteDroplet(ctx, d.ID); err != nil || r != digitalocean.Deleted {
		t.Errorf("after Retry-After: %v %v", r, err)
	}
	b := c.Budget()
	if b.RateLimited != 1 || b.HeldBack != 1001 || !b.BlockedUntil.Equal(epoch.Add(30*time.Second)) {
		t.Errorf("budget = %+v", b)
	}
	if !strings.Contains(e.logs.String(), `"retry_at"`) {
		t.Errorf("no warning logged: %s", e.logs)
	}
}

// Test429WithoutRetryAfter: a 429 without a usable Retry-After still pauses
// MinBackoff; with the hour spent, until RateLimit-Reset.
func Test429WithoutRetryAfter(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var hourSpent bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Limit", "5000")
		w.Header().Set("RateLimit-Remaining", "10")
		if hourSpent {
			w.Header().Set("RateLimit-Remaining", "0")
		}
		w.Header().Set("RateLimit-Reset", fmt.Sprint(epoch.Add(20*time.Minute).Unix()))
		w.WriteHeader(429)
		fmt.Fprint(w, `{"id":"too_many_requests","message":"API Rate limit exceeded."}`)
	}))
	defer api.Close()
	c, err := digitalocean.New(digitalocean.Config{BaseURL: api.URL, Token: sentinel, Label: "read", Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Account(ctx)
	if at, _ := digitalocean.RetryAt(err); !at.Equal(epoch.Add(digitalocean.MinBackoff)) {
		t.Errorf("no Retry-After: retry at %v", at)
	}
	e.clock.Advance(digitalocean.MinBackoff)
	hourSpent = true
	_, err = c.Account(ctx)
	if at, _ := digitalocean.RetryAt(err); !at.Equal(epoch.Add(20 * time.Minute)) {
		t.Errorf("hour spent: retry at %v, want RateLimit-Reset", at)
	}
}

// TestDeadlines: a request the API does not answer in time fails with
// ErrProvider and context.DeadlineExceeded; a caller's cancellation is
// context.Canceled.
func TestDeadlines(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := e.client(t, "read", dofake.ReadOnly, func(cfg *digitalocean.Config) { cfg.RequestTimeout = 30 * time.Millisecond })
	e.s.Inject(dofake.Fault{Route: dofake.RouteGetAccount, Latency: time.Minute})
	t0 := time.Now()
	_, err := c.Account(ctx)
	if !errors.Is(err, digitalocean.ErrProvider) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 30ms") {
		t.Errorf("timeout: %v", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Account(cctx); !errors.Is(err, context.Canceled) || !errors.Is(err, digitalocean.ErrProvider) {
		t.Errorf("canceled: %v", err)
	}
	if _, err := c.Account(ctx); err != nil {
		t.Errorf("next call: %v", err)
	}
}

// TestTokenNeverLeaks: in every way a call can fail, the token appears in
// no returned error (as text or %+v), no log line, and not in the client's
// or the config's printed form; a redirect never carries it elsewhere.
func TestTokenNeverLeaks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	logs := &syncBuf{}
	var outputs []string
	collect := func(err error) {
		if err != nil {
			outputs = append(outputs, err.Error(), fmt.Sprintf("%v %+v %#v %s %q", err, err, err, err, err))
		}
	}
	use := func(c *digitalocean.Client) {
		_, err := c.GetDroplet(ctx, 400000001)
		collect(err)
		_, err = c.ListDropletsByTag(ctx, digitalocean.TagChalupa)
		collect(err)
		_, err = c.DeleteDroplet(ctx, 400000001)
		collect(err)
		_, err = c.ListVolumesByTag(ctx, digitalocean.TagChalupa)
		collect(err)
		_, err = c.Sizes(ctx)
		collect(err)
		_, err = c.Account(ctx)
		collect(err)
		outputs = append(outputs, fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprintf("%+v", c.Budget()))
	}
	mk := func(label, base string, scopes []dofake.Scope) *digitalocean.Client {
		if scopes != nil {
			e.s.AddTokenValue(label, sentinel+label, scopes...)
		}
		cfg := digitalocean.Config{BaseURL: base, Token: digitalocean.Token(sentinel + label), Label: label, Clock: e.clock,
			Logger: zerolog.New(logs).Level(zerolog.TraceLevel), RequestTimeout: 50 * time.Millisecond}
		outputs = append(outputs, fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg))
		c, err := digitalocean.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("401", func(t *testing.T) { use(mk("unknown", e.s.URL, nil)) })
	t.Run("403", func(t *testing.T) { use(mk("customer", e.s.URL, dofake.CustomerScopes)) })
	t.Run("404 and 500", func(t *testing.T) {
		e.s.Inject(dofake.Fault{Status: 500, Count: 3})
		use(mk("write", e.s.URL, dofake.FullAccess))
	})
	t.Run("429", func(t *testing.T) {
		e.s.Inject(dofake.Fault{Status: 429, RetryAfter: time.Minute})
		use(mk("limited", e.s.URL, dofake.FullAccess))
	})
	t.Run("timeout", func(t *testing.T) {
		e.s.Inject(dofake.Fault{Latency: time.Minute, Count: 6})
		use(mk("slow", e.s.URL, dofake.FullAccess))
	})
	t.Run("echoed token and request id", func(t *testing.T) {
		echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("x-request-id", r.Header.Get("Authorization"))
			w.WriteHeader(403)
			fmt.Fprintf(w, `{"id":"Forbidden","message":"token %s\u0007 refused","request_id":%q}`,
				strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.Header.Get("Authorization"))
		}))
		defer echo.Close()
		use(mk("echo", echo.URL, nil))
	})
	t.Run("malformed answer", func(t *testing.T) {
		junk := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"droplet": [`)
		}))
		defer junk.Close()
		use(mk("junk", junk.URL, nil))
	})
	t.Run("redirect", func(t *testing.T) {
		var stolen []string
		var mu sync.Mutex
		thief := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			stolen = append(stolen, r.Header.Get("Authorization"))
			mu.Unlock()
		}))
		defer thief.Close()
		redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, thief.URL+r.URL.Path, http.StatusTemporaryRedirect)
		}))
		defer redirect.Close()
		c := mk("redirected", redirect.URL, nil)
		use(c)
		if len(stolen) != 0 {
			t.Errorf("a redirect was followed %d times", len(stolen))
		}
		_, err := c.Account(ctx)
		if !errors.Is(err, digitalocean.ErrProvider) || !strings.Contains(err.Error(), "redirect") {
			t.Errorf("redirect: %v", err)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		gone := httptest.NewServer(http.NotFoundHandler())
		gone.Close()
		c := mk("refused", gone.URL, nil)
		use(c)
		_, err := c.Account(ctx)
		if !errors.Is(err, digitalocean.ErrProvider) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("refused: %v", err)
		}
	})

	all := strings.Join(outputs, "\n") + "\n" + logs.String() + e.logs.String() + fmt.Sprintf("%+v", e.s.Requests())
	if strings.Contains(all, sentinel) {
		for _, line := range strings.Split(all, "\n") {
			if strings.Contains(line, sentinel) {
				t.Errorf("token leaked: %s", line)
			}
		}
	}
	if len(outputs) < 50 || !strings.Contains(all, "digitalocean") {
		t.Errorf("the scan saw too little: %d outputs", len(outputs))
	}
	if !strings.Contains(all, "[redacted]") {
		t.Error("the echoed token was not redacted (or not echoed)")
	}
}

// TestConcurrentUse: one client shared by many goroutines (run under
// -race).
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := e.client(t, "write", dofake.FullAccess)
	var ids []int
	for i := 0; i < 16; i++ {
		ids = append(ids, e.s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("race")}).ID)
	}
	var wg sync.WaitGroup
	results := make([]map[digitalocean.DeleteResult]int, 4)
	for w := range results {
		results[w] = map[digitalocean.DeleteResult]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, id := range ids {
				r, err := c.DeleteDroplet(ctx, id)
				if err != nil {
					t.Errorf("delete %d: %v", id, err)
				}
				results[w][r]++
				_, _ = c.Sizes(ctx)
				_, _ = c.ListDropletsByTag(ctx, digitalocean.EnvTag("race"))
				_ = c.Budget()
			}
		}()
	}
	wg.Wait()
	deleted := 0
	for _, m := range results {
		deleted += m[digitalocean.Deleted]
	}
	if deleted != len(ids) {
		t.Errorf("%d deletes succeeded, want %d (one per droplet)", deleted, len(ids))
	}
}

func TestTags(t *testing.T) {
	if digitalocean.EnvTag("demo-harbor") != "chalupa:env:demo-harbor" || digitalocean.BoxTag("b1") != "chalupa:box:b1" {
		t.Error("tag scheme")
	}
	for tag, ok := range map[string]bool{"chalupa": true, "chalupa:env:a-b_c": true, "": false, "a b": false, "ä": false,
		strings.Repeat("a", 255): true, strings.Repeat("a", 256): false} {
		if digitalocean.ValidTag(tag) != ok || dofake.ValidTag(tag) != ok {
			t.Errorf("ValidTag(%q) != %v", tag, ok)
		}
	}
}

// Test429RetryAfterSoonerThanReset: a 429 with the hour spent and a
// Retry-After sooner than RateLimit-Reset waits Retry-After, not the whole
// window: the provider said when to come back, and the next request then
// goes out (docs/operations.md, "DigitalOcean API").
func Test429RetryAfterSoonerThanReset(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("RateLimit-Limit", "5000")
		w.Header().Set("RateLimit-Remaining", "0")
		w.Header().Set("RateLimit-Reset", fmt.Sprint(epoch.Add(50*time.Minute).Unix()))
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(429)
		fmt.Fprint(w, `{"id":"too_many_requests","message":"API Rate limit exceeded."}`)
	}))
	defer api.Close()
	c, err := digitalocean.New(digitalocean.Config{BaseURL: api.URL, Token: sentinel, Label: "write", Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Account(ctx)
	if at, _ := digitalocean.RetryAt(err); !at.Equal(epoch.Add(30 * time.Second)) {
		t.Fatalf("retry at %v, want Retry-After (30 s), not RateLimit-Reset", at)
	}
	e.clock.Advance(29 * time.Second)
	if _, err := c.Account(ctx); calls.Load() != 1 || !errors.Is(err, digitalocean.ErrRateLimited) {
		t.Fatalf("before Retry-After: %d calls, %v; want the call held back", calls.Load(), err)
	}
	e.clock.Advance(time.Second)
	_, _ = c.Account(ctx)
	if calls.Load() != 2 {
		t.Fatalf("after Retry-After the request was held back (%d calls)", calls.Load())
	}
}
