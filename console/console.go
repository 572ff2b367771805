// Package console is the operator's web console (docs/operations.md,
// "Console"): server-rendered html/template pages and embedded static
// assets under /app on the daemon's listener, a password sign-in with
// server-side sessions, CSRF protection and a login rate limit stored in
// the database. Pages read through the same storage queries and services
// as the admin handlers, never through the admin HTTP API.
package console

import (
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
	"github.com/chalupa-run/chalupa/internal/randtoken"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/reaper/cost"
	"github.com/chalupa-run/chalupa/storage"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Session lifetimes (docs/operations.md, "Console"). A solo operator
// signs in for a working session: an hour without a request ends it (a
// laptop left open in a café), and twelve hours end it whatever happens (a
// stolen cookie is worth one working day at most).
const (
	SessionIdleTimeout     = time.Hour
	SessionAbsoluteTimeout = 12 * time.Hour
	// sessionTouchEvery is how stale last_seen_at may get before a request
	// writes it again: browsing must not cost a write per page.
	sessionTouchEvery = time.Minute
	// sessionPruneLimit bounds the expired sessions one login deletes.
	sessionPruneLimit = 100
)

// Login rate limit (docs/operations.md, "Console"): a source with
// LoginFailuresPerSource failures within LoginWindow, or the whole fleet
// with LoginFailuresFleet, is refused 429 with Retry-After until the
// window passes, a correct password included. Successes are never
// counted; refused attempts are not failures (they are not checked).
const (
	LoginWindow            = 10 * time.Minute
	LoginFailuresPerSource = 10
	LoginFailuresFleet     = 50
	// failurePruneLimit bounds the expired failures one login deletes.
	failurePruneLimit = 100
)

// Cookie names. On an https origin the session cookie takes the __Host-
// prefix: the browser then insists on Secure, Path=/ and no Domain.
const (
	sessionCookie         = "chalupa_session"
	loginCSRFCookie       = "chalupa_login_csrf"
	hostPrefix            = "__Host-"
	csrfField             = "csrf_token"
	maxFormBytes    int64 = 8 << 10
)

// ContentSecurityPolicy is sent with every console response: no script at
// all, styles and images from the daemon only, forms posting only to it,
// and no framing.
const ContentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Deps are what the console reads and writes through.
type Deps struct {
	// DB is the database; every write goes through DB.Writer.
	DB *storage.DB
	// Perf is the performance read service the admin API also uses.
	Perf *telemetry.PerformanceReader
	// Jobs is the converge job service the admin API also calls (nil:
	// converge forms say converge is not configured).
	Jobs *jobs.Service
	// Logs is the log broker's store, for download grants (nil without
	// CHALUPA_LOGS_URL: the deployment page lists log sessions without
	// links; docs/operations.md, "Logs").
	Logs logs.Store
	// Replication returns the replicator's health at now.
	Replication func(now time.Time) storage.ReplicationHealth
	// ClockWarning says, in words, what the reaper's clock guard holds
	// ("" when nothing: docs/operations.md, "Reaper"); nil shows nothing.
	ClockWarning func() string
	// OffsetWarning says, in words, that the fleet's clock offset is
	// beyond 30 s ("" while it is not; docs/operations.md, "Heartbeats and
	// deadlines"); nil shows nothing.
	OffsetWarning func() string
	// StorageWarning says, in words, that the database refuses writes or
	// the data directory's disk is below its floor ("" while neither: the
	// storage-unavailable and disk-low conditions, docs/operations.md,
	// "Alerts"); nil shows nothing.
	StorageWarning func() string
	// ModeWarning says, in words, that the reaper or costs are not fully
	// on ("" when the reaper is live and costs on); the layout shows it
	// on every page (docs/operations.md, "Configuration").
	ModeWarning string
	// CostRule is the billing rule estimates apply.
	CostRule cost.Rule
	// StorageBudget is every environment's storage budget
	// (CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES, bytes; 0 unlimited), shown
	// on its page beside what it holds (docs/operations.md, "Quotas").
	StorageBudget int64
	// AgentRelease is the configured agent release (CHALUPA_AGENT_*): an
	// environment's getting-started page renders its cloud-init from it
	// (docs/operations.md, "Agent install").
	AgentRelease agentrelease.Release
	// Version is the build version shown on every page.
	Version string
	// Origin is the daemon's public origin (CHALUPA_ORIGIN): state-changing
	// requests must come from it, and an http origin (loopback only) drops
	// the cookie's Secure flag.
	Origin string
	// TrustedProxies are the addresses whose X-Forwarded-For is believed
	// (CHALUPA_TRUSTED_PROXIES); empty trusts none.
	TrustedProxies []netip.Prefix
	Clock          clockwork.Clock
	Log            zerolog.Logger
}

// Console serves the console's routes.
type Console struct {
	d      Deps
	secure bool
	cookie string
	pages  map[string]*template.Template
	static http.Handler
	// loginMu serves login attempts one at a time, so the limit's check
	// and the failure it records cannot interleave with another attempt's
	// (and password hashing cannot be run in parallel by a flood).
	loginMu sync.Mutex
}

// Route is one console route for the daemon to register.
type Route struct {
	Method, Pattern string
	Handler         http.HandlerFunc
}

// New builds the console. It panics if an embedded template does not
// parse (a build mistake, caught by every test).
func New(d Deps) *Console {
	if d.Clock == nil {
		d.Clock = clockwork.NewRealClock()
	}
	c := &Console{d: d, secure: !strings.HasPrefix(d.Origin, "http://")}
	c.cookie = sessionCookie
	if c.secure {
		c.cookie = hostPrefix + sessionCookie
	}
	c.pages = parseTemplates()
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	c.static = http.StripPrefix("/static/", http.FileServerFS(sub))
	return c
}

// Routes lists the console's routes: the landing page, robots.txt, static
// assets, login and logout, and the /app pages. Every GET route is also
// registered for HEAD, answered as GET without the body (net/http drops
// it; docs/operations.md, "Console").
func (c *Console) Routes() []Route {
	rs := c.routes()
	for _, rt := range rs {
		if rt.Method == http.MethodGet {
			rs = append(rs, Route{http.MethodHead, rt.Pattern, rt.Handler})
		}
	}
	return rs
}

// NotFound answers 404 as a console page (the router's answer for the
// console's paths, and for unknown paths a browser asks for).
func (c *Console) NotFound(w http.ResponseWriter, r *http.Request) {
	c.page(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "Not found", "There is no page at this address.")
	})(w, r)
}

// MethodNotAllowed answers 405 as a console page; the caller sets Allow.
func (c *Console) MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	c.page(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusMethodNotAllowed, "Method not allowed", "This page does not take that kind of request.")
	})(w, r)
}

func (c *Console) routes() []Route {
	return []Route{
		{"GET", "/", c.page(c.landing)},
		{"GET", "/robots.txt", c.robots},
		{"GET", "/getting-started", c.page(c.gettingStarted)},
		{"GET", "/static/*file", c.serveStatic},
		{"GET", "/login", c.page(c.loginForm)},
		{"POST", "/login", c.page(c.login)},
		{"POST", "/logout", c.page(c.authed(c.logout))},
		{"GET", "/app", c.page(c.authed(c.fleet))},
		{"GET", "/app/events", c.page(c.authed(c.events))},
		{"GET", "/app/costs", c.page(c.authed(c.costs))},
		{"GET", "/app/env/:slug", c.page(c.authed(c.environment))},
		{"GET", "/app/env/:slug/deployments/:id", c.page(c.authed(c.deployment))},
		{"GET", "/app/env/:slug/getting-started", c.page(c.authed(c.envGettingStarted))},
		{"GET", "/app/env/:slug/deployments/:id/logs/:session/:seq", c.page(c.authed(c.logChunk))},
		{"GET", "/app/oracle", c.page(c.authed(c.oracle))},
		{"GET", "/app/boxes/:name", c.page(c.authed(c.box))},
		{"POST", "/app/boxes/:name/converge", c.page(c.authed(c.converge))},
		{"GET", "/app/jobs/:id", c.page(c.authed(c.job))},
	}
}

// SecurityHeaders sets the headers every console response carries.
func SecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("X-Robots-Tag", "noindex, nofollow")
}

// page adds the security headers and no-store to h's answers.
func (c *Console) page(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		SecurityHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-store")
		h(w, r)
	}
}

func (c *Console) robots(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("User-agent: *\nDisallow: /app\nDisallow: /api/\nDisallow: /admin-api/\nDisallow: /metrics\nDisallow: /login\n"))
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	if strings.HasSuffix(r.URL.Path, "/") {
		// Files only: the embedded directory is not listed.
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	c.static.ServeHTTP(w, r)
}

// session is the signed-in request's session.
type session struct {
	storage.ConsoleSession
}

type ctxKey struct{}

// hashID is how a session id is stored: its SHA-256, so a copy of the
// database holds no usable cookie.
func hashID(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// currentSession returns the request's live session, or false. An expired
// one is deleted; a live one has its last-seen time moved forward at most
// once a sessionTouchEvery.
func (c *Console) currentSession(r *http.Request) (session, bool) {
	ck, err := r.Cookie(c.cookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 128 {
		return session{}, false
	}
	ctx := r.Context()
	s, err := storage.ConsoleSessionByHash(ctx, c.d.DB.Read, hashID(ck.Value))
	if err != nil {
		if !errors.Is(err, storage.ErrNotFound) {
			c.d.Log.Warn().Err(err).Msg("console: session lookup failed")
		}
		return session{}, false
	}
	now := c.d.Clock.Now()
	if now.Sub(s.CreatedAt) >= SessionAbsoluteTimeout || now.Sub(s.LastSeenAt) >= SessionIdleTimeout {
		if err := c.d.DB.Writer.Do(ctx, func(tx storage.Tx) error { return storage.DeleteConsoleSession(ctx, tx, s.IDHash) }); err != nil {
			c.d.Log.Warn().Err(err).Msg("console: deleting an expired session failed")
		}
		return session{}, false
	}
	if now.Sub(s.LastSeenAt) >= sessionTouchEvery {
		// A failed touch only shortens the session's idle life.
		if err := c.d.DB.Writer.Do(ctx, func(tx storage.Tx) error { return storage.TouchConsoleSession(ctx, tx, s.IDHash, now) }); err != nil {
			c.d.Log.Warn().Err(err).Msg("console: touching a session failed")
		}
	}
	return session{s}, true
}

// authed runs h for a signed-in request; any other is sent to /login.
func (c *Console) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.currentSession(r)
		if !ok {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			c.fail(w, r, http.StatusForbidden, "Not signed in", "Sign in again, then retry.")
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, s)))
	}
}

func sessionOf(r *http.Request) session {
	s, _ := r.Context().Value(ctxKey{}).(session)
	return s
}

// sameOrigin is the CSRF check shared by every state-changing form besides
// its token: the Origin header must be the daemon's origin, and the
// browser's fetch metadata, when sent, must say same-origin.
func (c *Console) sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o == "" || o != c.d.Origin {
		return false
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return false
	}
	return true
}

// tokenEqual compares two CSRF tokens in constant time.
func tokenEqual(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return ha == hb
}

func newToken() string { return randtoken.New(32) }

// setCookie writes a console cookie with the flags every console cookie
// carries: HttpOnly, SameSite=Strict, Path=/, Secure off loopback.
func (c *Console) setCookie(w http.ResponseWriter, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		Secure: c.secure, SameSite: http.SameSiteStrictMode})
}
