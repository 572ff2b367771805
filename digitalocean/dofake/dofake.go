// Package dofake is a DigitalOcean API v2 test server (net/http/httptest)
// that every provider-facing test of chalupa shares: the DigitalOcean client
// (digitalocean), the reaper, customer sweeps, cost reconciliation and,
// later, converge. DigitalOcean cannot be reached from a test machine, so
// this is the one component tests do not run for real (docs/architecture.md,
// "Tests").
//
// It speaks the documented JSON shapes closely enough that
// github.com/digitalocean/godo cannot tell it from the real API:
//
//   - droplets: POST /v2/droplets (202), GET /v2/droplets (tag_name filter,
//     page/per_page pagination with links.pages and meta.total), GET
//     /v2/droplets/{id}, DELETE /v2/droplets/{id} (204, then 404), DELETE
//     /v2/droplets?tag_name= (204);
//   - volumes: GET /v2/volumes (name and region filters, paginated; each
//     volume carries tags and size_gigabytes), GET /v2/volumes/{id};
//   - what converge's Pulumi program needs (docs/operations.md,
//     "Converge"): droplet creation with ssh_keys, user_data and volumes;
//     POST /v2/volumes (201), DELETE /v2/volumes/{id} (204; 409 while
//     attached), POST /v2/volumes/{id}/actions (attach, detach; completed
//     at once); firewalls: POST /v2/firewalls (202), GET /v2/firewalls
//     (paginated), GET, PUT and DELETE /v2/firewalls/{id}; tags: POST
//     /v2/tags (201), POST and DELETE /v2/tags/{name}/resources (204).
//     Deleting a droplet detaches its volumes and removes it from every
//     firewall, as the real API does. WithOnCreate "boots" each created
//     droplet (a test runs its user data) before the create is answered,
//     and WithOnDelete runs for each droplet that goes away; SetStatus and
//     SetPublicIPv4 show the machine behind a droplet (dofake/machines
//     boots real ones on these hooks);
//   - sizes: GET /v2/sizes (slug, price_hourly, price_monthly, vcpus,
//     memory, disk, …), paginated;
//   - account: GET /v2/account;
//   - errors as {"id":"…","message":"…","request_id":"…"} with an
//     x-request-id header.
//
// Tokens carry scopes (see Scope): an unknown or missing token is 401, a
// token without the route's scope 403. Every authenticated request counts
// against its token's rate limits (a sliding minute and a sliding hour, 250
// and 5,000 by default, like the real API), reported in RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset; a request over either budget is
// 429 with Retry-After. Faults (a status or latency for the next N requests
// of a route, optionally of one token) are injected with Inject. Every
// request is recorded (Requests) with the label of its token, never the
// token itself, so a test can assert exactly which DELETE was sent with
// which token.
//
// Fixtures follow Coder's dbgen style: AddDroplet(Droplet{…}) fills every
// zero field with a default (region nyc3, size s-1vcpu-1gb, tag chalupa, …)
// and returns the stored droplet.
//
// A Server is safe for concurrent use.
package dofake

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// Rate-limit defaults: the real API's documented budgets per token.
const (
	// DefaultPerMinute is the burst budget: 250 requests in any 60 s.
	DefaultPerMinute = 250
	// DefaultPerHour is the hourly budget: 5,000 requests in any hour,
	// the one RateLimit-Limit and RateLimit-Remaining report.
	DefaultPerHour = 5000
)

// Labels recorded for requests that carry no usable token.
const (
	// LabelNone is recorded for a request without a bearer token.
	LabelNone = "(none)"
	// LabelUnknown is recorded for a bearer token the server does not know.
	LabelUnknown = "(unknown)"
)

// Server is a running fake DigitalOcean API. Create it with New.
type Server struct {
	// URL is the base URL to hand to a client ("http://127.0.0.1:PORT/"),
	// with the trailing slash godo's BaseURL needs.
	URL string

	srv   *httptest.Server
	clock clockwork.Clock

	mu        sync.Mutex
	perMinute int
	perHour   int
	tokens    map[string]*tokenState // by token value
	labels    map[string]bool
	holds     []*Hold // injected, released at Close
	droplets  map[int]*Droplet
	nextID    int
	volumes   map[string]*Volume
	firewalls map[string]*Firewall
	tags      map[string]bool // created with POST /v2/tags
	publicV4  string          // WithPublicIPv4; "" is 203.0.113.<n>
	onCreate  func(Droplet)   // WithOnCreate; nil: nothing
	onDelete  func(Droplet)   // WithOnDelete; nil: nothing
	deleted   []Droplet       // forgotten, for onDelete (runDeleted)
	actionSeq int
	sizes     map[string]Size
	account   Account
	faults    []*fault
	log       []Request
	seq       int
}

// Option configures a Server.
type Option func(*Server)

// WithClock makes the server read time from clock: the rate-limit windows,
// RateLimit-Reset and the created_at of new droplets. Injected latency
// always waits in real time (it exists to trip a client's deadline).
func WithClock(clock clockwork.Clock) Option { return func(s *Server) { s.clock = clock } }

// WithPublicIPv4 makes addr every droplet's public IPv4 address (instead
// of 203.0.113.<n>, which reaches nothing): converge's key delivery then
// dials a local SSH server standing in for the droplet's sshd.
func WithPublicIPv4(addr string) Option { return func(s *Server) { s.publicV4 = addr } }

// WithOnCreate makes f run once for each droplet POST /v2/droplets creates,
// with a copy of the stored droplet (its UserData as sent): a test "boots"
// the droplet there, e.g. by running its cloud-init against a sandbox root.
// f runs before the create is answered, without the server's lock (the
// droplet is already listed, and f may call the Server), on the request's
// goroutine: the creating client waits for it, so a boot has finished by
// the time the create returns. Fixtures (AddDroplet) do not run it.
func WithOnCreate(f func(Droplet)) Option { return func(s *Server) { s.onCreate = f } }

// WithOnDelete makes f run once for each droplet that goes away — DELETE
// /v2/droplets/{id}, DELETE /v2/droplets?tag_name= and RemoveDroplet —
// with a copy of the droplet as it was. f runs after the droplet is gone
// from every listing, without the server's lock, on the deleting request's
// goroutine before it is answered: a machine backend powers the machine
// off there (or starts to, and returns).
func WithOnDelete(f func(Droplet)) Option { return func(s *Server) { s.onDelete = f } }

// WithRateLimits sets every token's budgets: at most perMinute requests in
// any 60 s and perHour in any hour. Zero keeps the default for that window.
func WithRateLimits(perMinute, perHour int) Option {
	return func(s *Server) {
		if perMinute > 0 {
			s.perMinute = perMinute
		}
		if perHour > 0 {
			s.perHour = perHour
		}
	}
}

// New starts a fake API on a loopback port, seeded with the default size
// catalogue (DefaultSizes) and account, and closes it when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{
		clock:     clockwork.NewRealClock(),
		perMinute: DefaultPerMinute,
		perHour:   DefaultPerHour,
		tokens:    map[string]*tokenState{},
		labels:    map[string]bool{},
		droplets:  map[int]*Droplet{},
		nextID:    firstDropletID,
		volumes:   map[string]*Volume{},
		firewalls: map[string]*Firewall{},
		tags:      map[string]bool{},
		sizes:     map[string]Size{},
		account:   defaultAccount(),
	}
	for _, o := range opts {
		o(s)
	}
	for _, sz := range DefaultSizes() {
		s.sizes[sz.Slug] = sz
	}
	s.srv = httptest.NewServer(s.routes())
	s.URL = s.srv.URL + "/"
	t.Cleanup(s.Close)
	return s
}

// Close releases every Hold injected, then stops the server (tests usually
// leave it to t.Cleanup; a test of an unreachable API closes it early).
// Closing twice is harmless.
func (s *Server) Close() {
	s.mu.Lock()
	holds := s.holds
	s.mu.Unlock()
	for _, h := range holds {
		h.Release()
	}
	s.srv.Close()
}

// Scope is a DigitalOcean token scope, such as "droplet:read". The legacy
// full-access scopes "read" (every :read scope) and "write" (everything)
// are honoured as the real API honours them.
type Scope string

// Scopes used by the routes this server speaks.
const (
	ScopeRead          Scope = "read"
	ScopeWrite         Scope = "write"
	ScopeDropletRead   Scope = "droplet:read"
	ScopeDropletCreate Scope = "droplet:create"
	ScopeDropletDelete Scope = "droplet:delete"
	ScopeTagCreate     Scope = "tag:create"
	ScopeVolumeRead    Scope = "block_storage:read"
	ScopeSizesRead     Scope = "sizes:read"
	ScopeRegionsRead   Scope = "regions:read"
	ScopeActionsRead   Scope = "actions:read"
	ScopeImageRead     Scope = "image:read"
	ScopeAccountRead   Scope = "account:read"
	// Converge's scopes (firewalls, volume writes, tags).
	ScopeFirewallRead   Scope = "firewall:read"
	ScopeFirewallCreate Scope = "firewall:create"
	ScopeFirewallUpdate Scope = "firewall:update"
	ScopeFirewallDelete Scope = "firewall:delete"
	ScopeVolumeCreate   Scope = "block_storage:create"
	ScopeVolumeDelete   Scope = "block_storage:delete"
	ScopeVolumeActionDo Scope = "block_storage_action:create"
)

// Scope sets of the tokens chalupa is given.
var (
	// ReadOnly is a legacy read-only token (DIGITALOCEAN_READ_TOKEN):
	// every GET, no mutation.
	ReadOnly = []Scope{ScopeRead}
	// FullAccess is a legacy read-write token (the platform write token).
	FullAccess = []Scope{ScopeRead, ScopeWrite}
	// CustomerScopes is a customer's custom-scoped token: droplet:read and
	// droplet:delete, plus the scopes DigitalOcean adds to every token
	// holding droplet:read (regions:read, sizes:read, actions:read,
	// image:read): its control panel does not let a droplet:read token
	// exist without them. So a customer token may read sizes (chalupa
	// still takes prices from the platform read token), and is refused
	// (403) on volumes (block_storage:read) and the account (account:read).
	CustomerScopes = []Scope{ScopeDropletRead, ScopeDropletDelete, ScopeRegionsRead, ScopeSizesRead, ScopeActionsRead, ScopeImageRead}
)

type tokenState struct {
	label  string
	scopes map[Scope]bool
	sent   []time.Time // accepted requests within the last hour, oldest first
}

func (ts *tokenState) has(need Scope) bool {
	if ts.scopes[ScopeWrite] || ts.scopes[need] {
		return true
	}
	return strings.HasSuffix(string(need), ":read") && ts.scopes[ScopeRead]
}

// AddToken registers a bearer token with its label (what the request log
// records instead of the token) and scopes, and returns the token: a fresh
// random "dop_v1_…" value. Labels must be unique.
func (s *Server) AddToken(label string, scopes ...Scope) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	token := "dop_v1_" + hex.EncodeToString(b)
	s.AddTokenValue(label, token, scopes...)
	return token
}

// AddTokenValue registers a token whose value the test chose (a sentinel a
// test then searches for in logs and errors). It panics on a reused label
// or value: the request log must name exactly one token per label.
func (s *Server) AddTokenValue(label, token string, scopes ...Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if label == "" || label == LabelNone || label == LabelUnknown || s.labels[label] {
		panic(fmt.Sprintf("dofake: token label %q is empty, reserved or taken", label))
	}
	if _, ok := s.tokens[token]; ok || token == "" {
		panic("dofake: token value empty or registered twice")
	}
	ts := &tokenState{label: label, scopes: map[Scope]bool{}}
	for _, sc := range scopes {
		ts.scopes[sc] = true
	}
	s.labels[label] = true
	s.tokens[token] = ts
}

// RevokeToken makes the token with this label unknown from now on (401),
// as deleting it in the DigitalOcean control panel does.
func (s *Server) RevokeToken(label string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for v, ts := range s.tokens {
		if ts.label == label {
			delete(s.tokens, v)
		}
	}
}

// Request is one request the server received, in arrival order.
type Request struct {
	// Seq numbers requests from 1 in arrival order.
	Seq int
	// At is the server clock when the request arrived.
	At time.Time
	// Method and Path as sent ("DELETE", "/v2/droplets/1001").
	Method, Path string
	// Query is the query string in canonical form (url.Values.Encode:
	// keys sorted, values escaped), "" when none.
	Query string
	// Route is the route that matched ("" for an unknown path).
	Route Route
	// Token is the label of the bearer token, LabelNone or LabelUnknown;
	// never the token itself.
	Token string
	// Status is the HTTP status answered.
	Status int
}

// String is "METHOD /path?query token=LABEL → status".
func (r Request) String() string {
	q := ""
	if r.Query != "" {
		q = "?" + r.Query
	}
	return fmt.Sprintf("%s %s%s token=%s → %d", r.Method, r.Path, q, r.Token, r.Status)
}

// Requests returns every request received so far, oldest first. With
// filters, only those every filter accepts.
func (s *Server) Requests(filters ...func(Request) bool) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
next:
	for _, r := range s.log {
		for _, f := range filters {
			if !f(r) {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

// OnRoute is a Requests filter: requests that matched route.
func OnRoute(route Route) func(Request) bool {
	return func(r Request) bool { return r.Route == route }
}

// WithToken is a Requests filter: requests sent with the token of label.
func WithToken(label string) func(Request) bool {
	return func(r Request) bool { return r.Token == label }
}

// Deletes returns the droplet DELETE requests (by id and by tag), oldest
// first: what a reaper test asserts on.
func (s *Server) Deletes() []Request {
	return s.Requests(func(r Request) bool {
		return r.Route == RouteDeleteDroplet || r.Route == RouteDeleteDropletsByTag
	})
}

// ResetRequests forgets the request log (fixtures and rate-limit windows
// are kept).
func (s *Server) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}

// Fault makes the next Count requests of a route (optionally only those of
// one token) slow or failing.
type Fault struct {
	// Route the fault applies to; "" is every route.
	Route Route
	// Token limits the fault to requests with this token label; "" is any.
	Token string
	// Count is how many matching requests the fault affects (default 1).
	Count int
	// Latency is waited (in real time) before the request is answered;
	// the wait ends early when the client gives up.
	Latency time.Duration
	// HoldAnswer is waited (in real time) after the route has acted and
	// before its answer is written: the request took effect but the client
	// has not heard (a create whose caller is killed while waiting). The
	// wait ends early when the client gives up.
	HoldAnswer time.Duration
	// Hold, when set, holds the answer the same way until the test
	// releases it (Hold.Release) or the client gives up, and tells the
	// test when a request is held (Hold.Arrived): a test that kills its
	// client while the request is held gets an exact kill point.
	Hold *Hold
	// Status, when non-zero, is answered instead of the route's own
	// answer: 429 (with Retry-After and the rate-limit headers), 5xx, or
	// any other error status, in the API's error shape.
	Status int
	// RetryAfter is the Retry-After of an injected 429 (default 1 s).
	RetryAfter time.Duration
}

type fault struct {
	Fault
	left int
}

// Hold holds the answers of the requests a Fault matches: each has acted
// (a create took effect) but is not answered until Release. Make one with
// NewHold.
type Hold struct {
	arrived     chan struct{}
	arrivedOnce sync.Once
	released    chan struct{}
	releaseOnce sync.Once
}

// NewHold returns a hold that holds until released.
func NewHold() *Hold {
	return &Hold{arrived: make(chan struct{}), released: make(chan struct{})}
}

// Arrived is closed once the first matching request has acted and its
// answer is held.
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Release lets every held answer, and any later one, be written.
// Releasing twice is harmless.
func (h *Hold) Release() { h.releaseOnce.Do(func() { close(h.released) }) }

// Inject queues a fault. Faults are matched in the order injected; a
// request consumes at most one.
func (s *Server) Inject(f Fault) {
	if f.Count <= 0 {
		f.Count = 1
	}
	if f.RetryAfter <= 0 {
		f.RetryAfter = time.Second
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{Fault: f, left: f.Count})
	if f.Hold != nil {
		s.holds = append(s.holds, f.Hold)
	}
}

// takeFault returns the first pending fault for route and label, using up
// one of its requests. Called with s.mu held.
func (s *Server) takeFault(route Route, label string) *Fault {
	for i, f := range s.faults {
		if (f.Route == "" || f.Route == route) && (f.Token == "" || f.Token == label) {
			f.left--
			if f.left == 0 {
				s.faults = append(s.faults[:i], s.faults[i+1:]...)
			}
			out := f.Fault
			return &out
		}
	}
	return nil
}

// rateState is what the rate-limit headers of one answer say.
type rateState struct {
	limit, remaining int
	reset            time.Time
	retryAfter       time.Duration // > 0 when the request is refused
}

// admit counts a request against the token's windows, or refuses it when
// either budget is spent. Called with s.mu held.
func (s *Server) admit(ts *tokenState, now time.Time) rateState {
	cut := 0
	for cut < len(ts.sent) && !ts.sent[cut].After(now.Add(-time.Hour)) {
		cut++
	}
	ts.sent = ts.sent[cut:]
	inMinute := 0
	for i := len(ts.sent) - 1; i >= 0 && ts.sent[i].After(now.Add(-time.Minute)); i-- {
		inMinute++
	}
	st := rateState{limit: s.perHour}
	switch {
	case len(ts.sent) >= s.perHour:
		st.retryAfter = ts.sent[0].Add(time.Hour).Sub(now)
	case inMinute >= s.perMinute:
		st.retryAfter = ts.sent[len(ts.sent)-inMinute].Add(time.Minute).Sub(now)
	default:
		ts.sent = append(ts.sent, now)
	}
	st.remaining = s.perHour - len(ts.sent)
	st.reset = now
	if len(ts.sent) > 0 {
		st.reset = ts.sent[0].Add(time.Hour)
	}
	return st
}

// Droplets returns every droplet the server holds, by id.
func (s *Server) Droplets() []Droplet {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Droplet, 0, len(s.droplets))
	for _, d := range s.droplets {
		out = append(out, d.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Droplet returns the droplet with id, and whether it exists (a deleted
// droplet does not).
func (s *Server) Droplet(id int) (Droplet, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.droplets[id]
	if !ok {
		return Droplet{}, false
	}
	return d.clone(), true
}
