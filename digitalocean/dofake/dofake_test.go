package dofake_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/godo"
	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/testwait"
)

// bearer adds a bearer token to every request, as godo's oauth2 client
// does, without godo's retrying client (NewFromToken retries 429s and 5xx,
// which would hide what the server answered).
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func godoClient(t *testing.T, s *dofake.Server, token string) *godo.Client {
	t.Helper()
	c, err := godo.New(&http.Client{Transport: bearer{token}}, godo.SetBaseURL(s.URL))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// status is the HTTP status of a godo call's outcome.
func status(t *testing.T, resp *godo.Response, err error) int {
	t.Helper()
	if err != nil {
		var er *godo.ErrorResponse
		if !errors.As(err, &er) {
			t.Fatalf("not an API error: %v", err)
		}
		return er.Response.StatusCode
	}
	return resp.StatusCode
}

// TestGodoSpeaksToEveryRoute: godo decodes every route's answer into its
// own types with the fields chalupa reads filled in.
func TestGodoSpeaksToEveryRoute(t *testing.T) {
	ctx := context.Background()
	s := dofake.New(t)
	c := godoClient(t, s, s.AddToken("full", dofake.FullAccess...))
	tagged := s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("demo-harbor"), Size: "s-2vcpu-4gb", Region: "ams3"})
	other := s.AddDroplet(dofake.Droplet{Tags: dofake.NoTags})
	vol := s.AddVolume(dofake.Volume{SizeGiB: 250, Tags: dofake.EnvTags("demo-harbor"), DropletIDs: []int{tagged.ID}})

	t.Run("create", func(t *testing.T) {
		d, resp, err := c.Droplets.Create(ctx, &godo.DropletCreateRequest{
			Name: "box-1", Region: "nyc3", Size: "s-1vcpu-1gb",
			Image: godo.DropletCreateImage{Slug: "ubuntu-24-04-x64"}, Tags: dofake.EnvTags("demo-harbor"),
		})
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("create: %v %v", resp, err)
		}
		if d.ID == 0 || d.Name != "box-1" || d.Status != "new" || d.SizeSlug != "s-1vcpu-1gb" || d.Region.Slug != "nyc3" ||
			len(d.Tags) != 2 || d.Size.PriceHourly != 0.00893 {
			t.Errorf("created droplet = %+v", d)
		}
		if len(resp.Links.Actions) != 1 || resp.Links.Actions[0].Rel != "create" {
			t.Errorf("links = %+v", resp.Links)
		}
		got, _, err := c.Droplets.Get(ctx, d.ID)
		if err != nil || got.Status != "active" {
			t.Errorf("get after create: %+v %v", got, err)
		}
	})
	t.Run("get", func(t *testing.T) {
		d, _, err := c.Droplets.Get(ctx, tagged.ID)
		if err != nil {
			t.Fatal(err)
		}
		created, _ := time.Parse(time.RFC3339, d.Created)
		ip, _ := d.PublicIPv4()
		if d.ID != tagged.ID || d.Region.Slug != "ams3" || d.Size.Slug != "s-2vcpu-4gb" || d.Size.PriceMonthly != 24 ||
			d.Vcpus != 2 || d.Memory != 4096 || d.Disk != 80 || created.IsZero() || ip == "" || d.Image.Slug != dofake.DefaultImage {
			t.Errorf("droplet = %+v", d)
		}
	})
	t.Run("list by tag", func(t *testing.T) {
		ds, resp, err := c.Droplets.ListByTag(ctx, "chalupa:env:demo-harbor", nil)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[int]bool{}
		for _, d := range ds {
			ids[d.ID] = true
		}
		if !ids[tagged.ID] || ids[other.ID] || resp.Meta.Total != len(ds) || !resp.Links.IsLastPage() {
			t.Errorf("list = %v, meta %+v", ids, resp.Meta)
		}
	})
	t.Run("volumes", func(t *testing.T) {
		vs, resp, err := c.Storage.ListVolumes(ctx, &godo.ListVolumeParams{Region: "nyc3"})
		if err != nil || len(vs) != 1 || resp.Meta.Total != 1 {
			t.Fatalf("volumes: %+v %v", vs, err)
		}
		v := vs[0]
		if v.ID != vol.ID || v.SizeGigaBytes != 250 || len(v.Tags) != 2 || v.Region.Slug != "nyc3" ||
			len(v.DropletIDs) != 1 || v.CreatedAt.IsZero() {
			t.Errorf("volume = %+v", v)
		}
		if vs, _, _ := c.Storage.ListVolumes(ctx, &godo.ListVolumeParams{Region: "sfo3"}); len(vs) != 0 {
			t.Errorf("region filter: %+v", vs)
		}
		if got, _, err := c.Storage.GetVolume(ctx, vol.ID); err != nil || got.SizeGigaBytes != 250 {
			t.Errorf("get volume: %+v %v", got, err)
		}
	})
	t.Run("sizes", func(t *testing.T) {
		sizes, resp, err := c.Sizes.List(ctx, &godo.ListOptions{PerPage: 200})
		if err != nil || resp.Meta.Total != len(dofake.DefaultSizes()) {
			t.Fatalf("sizes: %v %+v", err, resp.Meta)
		}
		found := false
		for _, sz := range sizes {
			if sz.Slug == "gpu-h100x1-80gb" {
				found = sz.PriceHourly == 3.39 && sz.PriceMonthly == 2522.16 && sz.Vcpus == 20 && sz.GPUInfo != nil && sz.Available
			}
		}
		if !found {
			t.Errorf("GPU size missing or wrong: %+v", sizes)
		}
	})
	t.Run("account", func(t *testing.T) {
		a, _, err := c.Account.Get(ctx)
		if err != nil || a.UUID == "" || a.Status != "active" || a.Team == nil || a.DropletLimit != 25 {
			t.Errorf("account: %+v %v", a, err)
		}
	})
	t.Run("delete then 404", func(t *testing.T) {
		resp, err := c.Droplets.Delete(ctx, tagged.ID)
		if status(t, resp, err) != http.StatusNoContent {
			t.Fatalf("delete: %v", err)
		}
		resp, err = c.Droplets.Delete(ctx, tagged.ID)
		var er *godo.ErrorResponse
		if status(t, resp, err) != http.StatusNotFound || !errors.As(err, &er) || er.Message == "" || er.RequestID == "" {
			t.Errorf("second delete: %v", err)
		}
		if _, resp, err := c.Droplets.Get(ctx, tagged.ID); status(t, resp, err) != http.StatusNotFound {
			t.Errorf("get after delete: %v", err)
		}
		if _, ok := s.Droplet(tagged.ID); ok {
			t.Error("droplet still held")
		}
	})
	t.Run("unknown route", func(t *testing.T) {
		req, _ := c.NewRequest(ctx, http.MethodGet, "v2/load_balancers", nil)
		resp, err := c.Do(ctx, req, nil)
		if status(t, resp, err) != http.StatusNotFound {
			t.Errorf("unknown route: %v", err)
		}
	})
}

// TestCreateRefusals: the create route answers 422 for what the API
// refuses.
func TestCreateRefusals(t *testing.T) {
	s := dofake.New(t)
	c := godoClient(t, s, s.AddToken("full", dofake.FullAccess...))
	img := godo.DropletCreateImage{Slug: "ubuntu-24-04-x64"}
	for name, req := range map[string]godo.DropletCreateRequest{
		"bad name":     {Name: "no spaces", Region: "nyc3", Size: "s-1vcpu-1gb", Image: img},
		"no region":    {Name: "a", Size: "s-1vcpu-1gb", Image: img},
		"unknown size": {Name: "a", Region: "nyc3", Size: "s-99vcpu", Image: img},
		"bad tag":      {Name: "a", Region: "nyc3", Size: "s-1vcpu-1gb", Image: img, Tags: []string{"no spaces"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, resp, err := c.Droplets.Create(context.Background(), &req)
			if status(t, resp, err) != http.StatusUnprocessableEntity {
				t.Errorf("status: %v", err)
			}
		})
	}
	if n := len(s.Droplets()); n != 0 {
		t.Errorf("%d droplets created by refused requests", n)
	}
}

// TestPagination: a tag listing across four pages, followed the way godo's
// callers do (links.pages.next until the last page), sees every droplet
// once, and meta.total is the whole count on every page.
func TestPagination(t *testing.T) {
	ctx := context.Background()
	s := dofake.New(t)
	c := godoClient(t, s, s.AddToken("read", dofake.ReadOnly...))
	want := map[int]bool{}
	for i := 0; i < 7; i++ {
		want[s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("pages")}).ID] = true
		s.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("other")})
	}
	got := map[int]bool{}
	opt := &godo.ListOptions{Page: 1, PerPage: 2}
	pages := 0
	for {
		ds, resp, err := c.Droplets.ListByTag(ctx, "chalupa:env:pages", opt)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if resp.Meta.Total != 7 {
			t.Errorf("page %d: meta.total = %d", opt.Page, resp.Meta.Total)
		}
		if cur, err := resp.Links.CurrentPage(); err != nil || cur != opt.Page {
			t.Errorf("page %d: CurrentPage = %d, %v", opt.Page, cur, err)
		}
		for _, d := range ds {
			if got[d.ID] {
				t.Errorf("droplet %d listed twice", d.ID)
			}
			got[d.ID] = true
		}
		if resp.Links.IsLastPage() {
			if len(ds) != 1 {
				t.Errorf("last page holds %d", len(ds))
			}
			break
		}
		if !strings.Contains(resp.Links.Pages.Next, "tag_name=chalupa%3Aenv%3Apages") || !strings.HasPrefix(resp.Links.Pages.Next, s.URL) {
			t.Errorf("next link %q lost the filter or the base", resp.Links.Pages.Next)
		}
		opt.Page++
	}
	if pages != 4 || len(got) != 7 {
		t.Errorf("pages = %d, droplets = %d, want 4 and 7", pages, len(got))
	}
	for id := range want {
		if !got[id] {
			t.Errorf("droplet %d missed", id)
		}
	}
	// Past the last page: an empty list, not an error.
	ds, _, err := c.Droplets.ListByTag(ctx, "chalupa:env:pages", &godo.ListOptions{Page: 9, PerPage: 2})
	if err != nil || len(ds) != 0 {
		t.Errorf("page 9: %d droplets, %v", len(ds), err)
	}
}

// TestScopes: unknown and missing tokens are 401 everywhere; a read-only
// token reads but cannot delete or create; a customer token (droplet:read
// and droplet:delete, plus what DigitalOcean adds to droplet:read) deletes
// droplets and reads sizes but is refused volumes and the account.
func TestScopes(t *testing.T) {
	ctx := context.Background()
	s := dofake.New(t)
	tokens := map[string]string{
		"read":     s.AddToken("read", dofake.ReadOnly...),
		"write":    s.AddToken("write", dofake.FullAccess...),
		"customer": s.AddToken("customer", dofake.CustomerScopes...),
		"unknown":  "dop_v1_not-a-token",
		"none":     "",
	}
	type call func(c *godo.Client) (*godo.Response, error)
	calls := map[string]call{
		"list droplets": func(c *godo.Client) (*godo.Response, error) {
			_, r, err := c.Droplets.ListByTag(ctx, "chalupa", nil)
			return r, err
		},
		"get droplet": func(c *godo.Client) (*godo.Response, error) {
			d := s.AddDroplet(dofake.Droplet{})
			_, r, err := c.Droplets.Get(ctx, d.ID)
			return r, err
		},
		"delete droplet": func(c *godo.Client) (*godo.Response, error) {
			d := s.AddDroplet(dofake.Droplet{})
			return c.Droplets.Delete(ctx, d.ID)
		},
		"create droplet": func(c *godo.Client) (*godo.Response, error) {
			_, r, err := c.Droplets.Create(ctx, &godo.DropletCreateRequest{Name: "x", Region: "nyc3", Size: "s-1vcpu-1gb",
				Image: godo.DropletCreateImage{Slug: "ubuntu-24-04-x64"}})
			return r, err
		},
		"volumes": func(c *godo.Client) (*godo.Response, error) {
			_, r, err := c.Storage.ListVolumes(ctx, nil)
			return r, err
		},
		"sizes": func(c *godo.Client) (*godo.Response, error) {
			_, r, err := c.Sizes.List(ctx, nil)
			return r, err
		},
		"account": func(c *godo.Client) (*godo.Response, error) {
			_, r, err := c.Account.Get(ctx)
			return r, err
		},
	}
	want := map[string]map[string]int{
		"read":     {"list droplets": 200, "get droplet": 200, "delete droplet": 403, "create droplet": 403, "volumes": 200, "sizes": 200, "account": 200},
		"write":    {"list droplets": 200, "get droplet": 200, "delete droplet": 204, "create droplet": 202, "volumes": 200, "sizes": 200, "account": 200},
		"customer": {"list droplets": 200, "get droplet": 200, "delete droplet": 204, "create droplet": 403, "volumes": 403, "sizes": 200, "account": 403},
		"unknown":  {"list droplets": 401, "get droplet": 401, "delete droplet": 401, "create droplet": 401, "volumes": 401, "sizes": 401, "account": 401},
		"none":     {"list droplets": 401, "get droplet": 401, "delete droplet": 401, "create droplet": 401, "volumes": 401, "sizes": 401, "account": 401},
	}
	for tok, routes := range want {
		for name, code := range routes {
			t.Run(tok+"/"+name, func(t *testing.T) {
				c := godoClient(t, s, tokens[tok])
				resp, err := calls[name](c)
				if got := status(t, resp, err); got != code {
					t.Errorf("status %d, want %d (%v)", got, code, err)
				}
				var er *godo.ErrorResponse
				if code >= 400 && errors.As(err, &er) && er.Message == "" {
					t.Error("error without a message")
				}
			})
		}
	}
	t.Run("tagging at create needs tag:create", func(t *testing.T) {
		tok := s.AddToken("create-only", dofake.ScopeDropletCreate, dofake.ScopeDropletRead)
		c := godoClient(t, s, tok)
		req := &godo.DropletCreateRequest{Name: "x", Region: "nyc3", Size: "s-1vcpu-1gb", Image: godo.DropletCreateImage{Slug: "ubuntu-24-04-x64"}}
		if _, resp, err := c.Droplets.Create(ctx, req); status(t, resp, err) != 202 {
			t.Errorf("untagged create: %v", err)
		}
		req.Tags = []string{"chalupa"}
		if _, resp, err := c.Droplets.Create(ctx, req); status(t, resp, err) != 403 {
			t.Errorf("tagged create: %v", err)
		}
	})
	t.Run("revoked token", func(t *testing.T) {
		tok := s.AddToken("revoked", dofake.FullAccess...)
		s.RevokeToken("revoked")
		if _, resp, err := godoClient(t, s, tok).Account.Get(ctx); status(t, resp, err) != 401 {
			t.Errorf("revoked token: %v", err)
		}
	})
}

// TestRateLimits: the headers godo exposes as Response.Rate count down the
// hourly budget per token; the minute and hour budgets each answer 429 with
// Retry-After until the oldest request leaves the window.
func TestRateLimits(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC))
	s := dofake.New(t, dofake.WithClock(clock), dofake.WithRateLimits(3, 5))
	c := godoClient(t, s, s.AddToken("read", dofake.ReadOnly...))
	other := godoClient(t, s, s.AddToken("other", dofake.ReadOnly...))
	start := clock.Now()

	get := func() (*godo.Response, error) {
		_, r, err := c.Account.Get(ctx)
		return r, err
	}
	for i := 1; i <= 3; i++ {
		resp, err := get()
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if resp.Rate.Limit != 5 || resp.Rate.Remaining != 5-i || !resp.Rate.Reset.Time.Equal(start.Add(time.Hour)) {
			t.Errorf("request %d: rate %+v", i, resp.Rate)
		}
		clock.Advance(time.Second)
	}
	resp, err := get()
	if status(t, resp, err) != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "57" || resp.Rate.Remaining != 2 {
		t.Fatalf("minute budget: %v, Retry-After %q, rate %+v", err, resp.Header.Get("Retry-After"), resp.Rate)
	}
	if _, _, err := other.Account.Get(ctx); err != nil {
		t.Errorf("another token shares the budget: %v", err)
	}
	clock.Advance(57 * time.Second) // the first request leaves the minute
	if _, err := get(); err != nil {
		t.Fatalf("after the minute: %v", err)
	}
	clock.Advance(time.Minute)
	if resp, err := get(); err != nil || resp.Rate.Remaining != 0 {
		t.Fatalf("fifth: %v %+v", err, resp.Rate)
	}
	clock.Advance(time.Minute)
	resp, err = get()
	if status(t, resp, err) != http.StatusTooManyRequests || resp.Rate.Remaining != 0 {
		t.Fatalf("hour budget: %v %+v", err, resp.Rate)
	}
	if ra := resp.Header.Get("Retry-After"); ra != fmt.Sprint(int(start.Add(time.Hour).Sub(clock.Now()).Seconds())) {
		t.Errorf("Retry-After %s, want until the first request is an hour old", ra)
	}
	clock.Advance(start.Add(time.Hour + time.Second).Sub(clock.Now()))
	if _, err := get(); err != nil {
		t.Errorf("after the hour: %v", err)
	}
}

// TestFaults: injected statuses and latency hit the next N requests of
// their route (and token), then the route answers normally again.
func TestFaults(t *testing.T) {
	ctx := context.Background()
	s := dofake.New(t)
	c := godoClient(t, s, s.AddToken("write", dofake.FullAccess...))
	cust := godoClient(t, s, s.AddToken("customer", dofake.CustomerScopes...))
	d := s.AddDroplet(dofake.Droplet{})

	t.Run("500 twice", func(t *testing.T) {
		s.Inject(dofake.Fault{Route: dofake.RouteDeleteDroplet, Status: 500, Count: 2})
		for i := 0; i < 2; i++ {
			if resp, err := c.Droplets.Delete(ctx, d.ID); status(t, resp, err) != 500 {
				t.Errorf("attempt %d: %v", i, err)
			}
		}
		if _, ok := s.Droplet(d.ID); !ok {
			t.Fatal("a failed delete deleted")
		}
		if _, _, err := c.Droplets.Get(ctx, d.ID); err != nil {
			t.Errorf("other route hit: %v", err)
		}
		if resp, err := c.Droplets.Delete(ctx, d.ID); status(t, resp, err) != 204 {
			t.Errorf("third attempt: %v", err)
		}
	})
	t.Run("429 with Retry-After", func(t *testing.T) {
		s.Inject(dofake.Fault{Route: dofake.RouteGetAccount, Status: 429, RetryAfter: 30 * time.Second})
		_, resp, err := c.Account.Get(ctx)
		if status(t, resp, err) != 429 || resp.Header.Get("Retry-After") != "30" || resp.Rate.Limit != dofake.DefaultPerHour {
			t.Errorf("injected 429: %v %q %+v", err, resp.Header.Get("Retry-After"), resp.Rate)
		}
	})
	t.Run("one token only", func(t *testing.T) {
		s.Inject(dofake.Fault{Route: dofake.RouteListDroplets, Token: "customer", Status: 503})
		if _, _, err := c.Droplets.List(ctx, nil); err != nil {
			t.Errorf("write token hit: %v", err)
		}
		if _, resp, err := cust.Droplets.List(ctx, nil); status(t, resp, err) != 503 {
			t.Errorf("customer not hit: %v", err)
		}
	})
	t.Run("latency past the client's deadline", func(t *testing.T) {
		s.Inject(dofake.Fault{Route: dofake.RouteListSizes, Latency: time.Minute})
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, _, err := c.Sizes.List(cctx, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the deadline", err)
		}
		// The server notices the client left and records it.
		testwait.Eventually(t, testwait.Short, "the request recorded as 499 (client gone)", func() (bool, string) {
			reqs := s.Requests(dofake.OnRoute(dofake.RouteListSizes))
			return len(reqs) == 1 && reqs[0].Status == 499, fmt.Sprint(reqs)
		})
	})
	t.Run("a held answer: the create took effect, the client never heard", func(t *testing.T) {
		s.Inject(dofake.Fault{Route: dofake.RouteCreateFirewall, HoldAnswer: time.Minute})
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		before := len(s.Firewalls())
		_, _, err := c.Firewalls.Create(cctx, &godo.FirewallRequest{Name: "held", Tags: []string{"chalupa:box:held"},
			InboundRules: []godo.InboundRule{{Protocol: "tcp", PortRange: "22", Sources: &godo.Sources{Addresses: []string{"198.51.100.9/32"}}}}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the deadline", err)
		}
		if n := len(s.Firewalls()); n != before+1 {
			t.Fatalf("%d firewalls after the held create, want %d", n, before+1)
		}
	})
	t.Run("a hold: the create took effect, the answer waits for Release", func(t *testing.T) {
		hold := dofake.NewHold()
		s.Inject(dofake.Fault{Route: dofake.RouteCreateFirewall, Hold: hold})
		before := len(s.Firewalls())
		answered := make(chan error, 1)
		go func() {
			_, _, err := c.Firewalls.Create(ctx, &godo.FirewallRequest{Name: "held-until-released", Tags: []string{"chalupa:box:held"},
				InboundRules: []godo.InboundRule{{Protocol: "tcp", PortRange: "22", Sources: &godo.Sources{Addresses: []string{"198.51.100.9/32"}}}}})
			answered <- err
		}()
		<-hold.Arrived()
		if n := len(s.Firewalls()); n != before+1 {
			t.Fatalf("%d firewalls once the create is held, want %d", n, before+1)
		}
		select {
		case err := <-answered:
			t.Fatalf("answered while held: %v", err)
		default:
		}
		hold.Release()
		if err := <-answered; err != nil {
			t.Fatalf("after Release: %v", err)
		}
	})
	t.Run("short latency, then normal", func(t *testing.T) {
		s.Inject(dofake.Fault{Route: dofake.RouteGetAccount, Latency: 5 * time.Millisecond})
		t0 := time.Now()
		if _, _, err := c.Account.Get(ctx); err != nil || time.Since(t0) < 5*time.Millisecond {
			t.Errorf("delayed call: %v after %v", err, time.Since(t0))
		}
	})
}

// TestRequestLog: every request is recorded with its route, canonical
// query, token label and status; token values never are.
func TestRequestLog(t *testing.T) {
	ctx := context.Background()
	s := dofake.New(t)
	const sentinel = "dop_v1_SENTINEL0123456789abcdef"
	s.AddTokenValue("write", sentinel, dofake.FullAccess...)
	c := godoClient(t, s, sentinel)
	d := s.AddDroplet(dofake.Droplet{})
	_, _, _ = c.Droplets.ListByTag(ctx, "chalupa:env:x", &godo.ListOptions{PerPage: 50})
	_, _ = c.Droplets.Delete(ctx, d.ID)
	_, _ = godoClient(t, s, "dop_v1_wrong").Droplets.Delete(ctx, d.ID)
	_, _ = godoClient(t, s, "").Droplets.Delete(ctx, d.ID)

	got := s.Requests()
	want := []string{
		"GET /v2/droplets?per_page=50&tag_name=chalupa%3Aenv%3Ax token=write → 200",
		fmt.Sprintf("DELETE /v2/droplets/%d token=write → 204", d.ID),
		fmt.Sprintf("DELETE /v2/droplets/%d token=(unknown) → 401", d.ID),
		fmt.Sprintf("DELETE /v2/droplets/%d token=(none) → 401", d.ID),
	}
	if len(got) != len(want) {
		t.Fatalf("log = %v", got)
	}
	for i := range want {
		if got[i].String() != want[i] || got[i].Seq != i+1 {
			t.Errorf("log[%d] = %q (seq %d), want %q", i, got[i], got[i].Seq, want[i])
		}
	}
	if dels := s.Deletes(); len(dels) != 3 || dels[0].Route != dofake.RouteDeleteDroplet {
		t.Errorf("Deletes = %v", dels)
	}
	if w := s.Requests(dofake.WithToken("write"), dofake.OnRoute(dofake.RouteDeleteDroplet)); len(w) != 1 {
		t.Errorf("filtered = %v", w)
	}
	if dump := fmt.Sprintf("%+v %#v", got, got); strings.Contains(dump, sentinel) || strings.Contains(dump, "dop_v1_wrong") {
		t.Error("the request log holds a token value")
	}
	s.ResetRequests()
	if len(s.Requests()) != 0 {
		t.Error("ResetRequests kept entries")
	}
}

// TestConcurrentDeletes: many clients deleting the same droplets at once
// (run under -race): each droplet is deleted by exactly one 204, every
// other attempt is 404, and the log holds every request.
func TestConcurrentDeletes(t *testing.T) {
	ctx := context.Background()
	s := dofake.New(t)
	var ids []int
	for i := 0; i < 20; i++ {
		ids = append(ids, s.AddDroplet(dofake.Droplet{}).ID)
	}
	const workers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := map[int]int{}
	for w := 0; w < workers; w++ {
		c := godoClient(t, s, s.AddToken(fmt.Sprintf("w%d", w), dofake.FullAccess...))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, id := range ids {
				resp, err := c.Droplets.Delete(ctx, id)
				if err == nil && resp.StatusCode == 204 {
					mu.Lock()
					ok[id]++
					mu.Unlock()
				}
				_, _, _ = c.Droplets.List(ctx, nil)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if ok[id] != 1 {
			t.Errorf("droplet %d deleted %d times", id, ok[id])
		}
	}
	if n := len(s.Deletes()); n != workers*len(ids) {
		t.Errorf("%d deletes logged, want %d", n, workers*len(ids))
	}
}

// TestMachineHooks: WithOnDelete runs once for each droplet that goes away,
// by id, by tag and behind chalupa's back, after it is gone from the
// listing; SetStatus and SetPublicIPv4 show in what the API answers — what
// a machine backend (dofake/machines) relies on.
func TestMachineHooks(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var gone []string
	var s *dofake.Server
	s = dofake.New(t, dofake.WithOnDelete(func(d dofake.Droplet) {
		if _, still := s.Droplet(d.ID); still {
			t.Errorf("droplet %d still listed when the hook runs", d.ID)
		}
		mu.Lock()
		gone = append(gone, d.Name)
		mu.Unlock()
	}))
	c := godoClient(t, s, s.AddToken("all", dofake.FullAccess...))
	one := s.AddDroplet(dofake.Droplet{Name: "one"})
	s.AddDroplet(dofake.Droplet{Name: "two", Tags: []string{"chalupa", "group"}})
	s.AddDroplet(dofake.Droplet{Name: "three", Tags: []string{"chalupa", "group"}})
	four := s.AddDroplet(dofake.Droplet{Name: "four"})

	if !s.SetStatus(one.ID, "off") || !s.SetPublicIPv4(one.ID, "10.250.0.2") {
		t.Fatal("SetStatus/SetPublicIPv4 of a stored droplet reported none")
	}
	d, _, err := c.Droplets.Get(ctx, one.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ip, _ := d.PublicIPv4(); d.Status != "off" || ip != "10.250.0.2" {
		t.Errorf("status %q, public IPv4 %q; want off, 10.250.0.2", d.Status, ip)
	}
	if s.SetStatus(999, "off") || s.SetPublicIPv4(999, "10.250.0.2") {
		t.Error("SetStatus/SetPublicIPv4 of a missing droplet reported one")
	}

	if _, err := c.Droplets.Delete(ctx, one.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Droplets.DeleteByTag(ctx, "group"); err != nil {
		t.Fatal(err)
	}
	s.RemoveDroplet(four.ID)
	s.RemoveDroplet(four.ID) // gone already: no second call
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(gone)
	if want := []string{"four", "one", "three", "two"}; !slices.Equal(gone, want) {
		t.Errorf("hook ran for %v, want %v", gone, want)
	}
}
