package daemon

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/console"
	"github.com/chalupa-run/chalupa/ingest"
)

// Route is one registered route: its group (which fixes its
// authentication), method and httprouter pattern.
type Route struct {
	Group, Method, Pattern string
}

// Route groups. Each declares its authentication once and owns its path
// prefixes; registering a path in a group that does not own it panics, so a
// route cannot land behind the wrong check by accident
// (docs/architecture.md, "How a request flows").
const (
	// GroupPublic needs no authentication: GET /api/health only.
	GroupPublic = "public"
	// GroupProbe takes Bearer CHALUPA_READY_TOKEN: readiness and metrics.
	GroupProbe = "probe"
	// GroupAdmin takes Bearer CHALUPA_ADMIN_TOKEN, never a cookie.
	GroupAdmin = "admin"
	// GroupIngest takes a protocol-v1 request signature.
	GroupIngest = "ingest"
	// GroupConsole is the web console: its pages check the console's own
	// session cookie (console package); nothing else accepts that cookie.
	GroupConsole = "console"
	// groupUnrouted names, in the operations report, requests for paths
	// no group owns (answered 404 or 405).
	groupUnrouted = "unrouted"
)

// groupPrefixes maps each path prefix (or exact path, without a trailing
// slash) to the group that owns it.
var groupPrefixes = []struct{ prefix, group string }{
	{"/api/health", GroupPublic},
	{"/api/ready", GroupProbe},
	{"/metrics", GroupProbe},
	{"/api/admin/", GroupAdmin},
	{"/admin-api/", GroupAdmin},
	{"/api/ingest/", GroupIngest},
	{"/app", GroupConsole},
	{"/app/", GroupConsole},
	{"/login", GroupConsole},
	{"/logout", GroupConsole},
	{"/robots.txt", GroupConsole},
	{"/getting-started", GroupConsole},
	{"/static/", GroupConsole},
}

// groupOf returns the group owning path, "" for none. "/" alone (the
// landing page) is the console's.
func groupOf(path string) string {
	if path == "/" {
		return GroupConsole
	}
	for _, g := range groupPrefixes {
		if path == g.prefix || (strings.HasSuffix(g.prefix, "/") && strings.HasPrefix(path, g.prefix)) {
			return g.group
		}
	}
	return ""
}

// newRouter makes the router with JSON answers for unknown routes and
// methods and a redacted 500 for a panicking handler.
func newRouter(s *Server) *httprouter.Router {
	r := httprouter.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = true
	// httprouter answers OPTIONS itself by default, outside wrap: no
	// request id, log line or metric. Nothing here serves CORS.
	r.HandleOPTIONS = false
	r.NotFound = s.wrap("notfound", func(w http.ResponseWriter, r *http.Request) {
		if s.console != nil && wantsConsolePage(r) {
			s.console.NotFound(w, r)
			return
		}
		// A browser may land here from the console: the console's headers
		// (CSP, nosniff, noindex) are harmless on the API's JSON.
		console.SecurityHeaders(w.Header())
		writeError(w, http.StatusNotFound, "not_found", "no such route")
	})
	// A wrong method on a bearer-guarded route is answered only after the
	// group's authentication, so an unauthenticated caller cannot map the
	// admin surface (which paths exist, which methods they take) from 405s.
	// httprouter sets the Allow header before calling this handler; it is
	// held back until the caller has authenticated.
	r.MethodNotAllowed = s.wrap("notallowed", func(w http.ResponseWriter, r *http.Request) {
		allow := servedMethods(w.Header().Get("Allow"))
		w.Header().Del("Allow")
		notAllowed := func(w http.ResponseWriter, r *http.Request) {
			if allow != "" {
				w.Header().Set("Allow", allow)
			}
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this route")
		}
		switch groupOf(r.URL.Path) {
		case GroupAdmin:
			bearer(s.cfg.Secrets.AdminToken, notAllowed)(w, r)
		case GroupProbe:
			bearer(s.cfg.Secrets.ReadyToken, notAllowed)(w, r)
		case GroupConsole:
			if allow != "" {
				w.Header().Set("Allow", allow)
			}
			s.console.MethodNotAllowed(w, r)
		default:
			notAllowed(w, r)
		}
	})
	r.PanicHandler = func(w http.ResponseWriter, r *http.Request, v any) {
		s.log.Error().Str("request_id", w.Header().Get("X-Request-Id")).Interface("panic", v).Msg("handler panicked")
		writeError(w, http.StatusInternalServerError, "internal", "internal error")
	}
	return r
}

// wantsConsolePage reports whether a 404 is answered as a console HTML
// page: every path the console owns, and an unknown path whose request
// asks for HTML (a browser); the APIs' paths keep their JSON errors
// (docs/operations.md, "Console").
func wantsConsolePage(r *http.Request) bool {
	switch groupOf(r.URL.Path) {
	case GroupConsole:
		return true
	case "":
		return strings.Contains(r.Header.Get("Accept"), "text/html")
	}
	return false
}

// servedMethods is httprouter's Allow value without OPTIONS. httprouter
// always appends OPTIONS, assuming it answers OPTIONS itself; with
// HandleOPTIONS off an OPTIONS request is a 405 like any other unserved
// method, so Allow must not offer it (RFC 9110, section 10.2.1: Allow lists
// the methods the resource supports).
func servedMethods(allow string) string {
	var out []string
	for _, m := range strings.Split(allow, ",") {
		if m = strings.TrimSpace(m); m != "" && m != http.MethodOptions {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}

// handle registers h (already behind its group's authentication) for
// method and pattern. It panics when group does not own pattern, or when
// the route is registered twice: both are programming mistakes that must
// stop the daemon at start, not surface as a hole or a 404.
func (s *Server) handle(group, method, pattern string, h http.HandlerFunc) {
	if g := groupOf(pattern); g != group {
		panic(fmt.Sprintf("daemon: route %s %s registered in group %q but its path belongs to %q", method, pattern, group, g))
	}
	for _, rt := range s.routes {
		if rt.Method == method && rt.Pattern == pattern {
			panic(fmt.Sprintf("daemon: route %s %s registered twice", method, pattern))
		}
	}
	s.routes = append(s.routes, Route{Group: group, Method: method, Pattern: pattern})
	s.router.Handler(method, pattern, s.wrap(pattern, h))
}

// public registers a route that needs no authentication.
func (s *Server) public(method, pattern string, h http.HandlerFunc) {
	s.handle(GroupPublic, method, pattern, h)
}

// probe registers a route behind Bearer CHALUPA_READY_TOKEN.
func (s *Server) probe(method, pattern string, h http.HandlerFunc) {
	s.handle(GroupProbe, method, pattern, bearer(s.cfg.Secrets.ReadyToken, h))
}

// admin registers a route behind Bearer CHALUPA_ADMIN_TOKEN.
func (s *Server) admin(method, pattern string, h http.HandlerFunc) {
	s.handle(GroupAdmin, method, pattern, bearer(s.cfg.Secrets.AdminToken, h))
}

// sharedKeyDeprecation is the Deprecation header (RFC 9745) sent on the
// shared-key path: deprecated since 2026-01-01T00:00:00Z, when
// per-environment keys replaced it (docs/operations.md, "Signed ingest").
const sharedKeyDeprecation = "@1767225600"

// maxIngestInFlight bounds the signed-ingest requests the daemon works on
// at once (docs/operations.md, "Signed ingest"); one more is answered 503
// overloaded with Retry-After before its body is read. Requests beyond
// what the writer can commit only wait, and each waits for all those ahead
// of it: at the ~2,500-3,500 heartbeats/s one vCPU commits, 256 waiting is
// under 100 ms of queue, and 256 is also one full writer batch
// (storage.DefaultMaxBatch), so the bound never stops a batch from filling.
// The price: a write stall longer than ~250 ms (Litestream's checkpoint
// holds the write lock; on a busy disk it has taken that long) sheds at
// 1,000 heartbeats/s too. Agents retry a 5xx with back-off
// (protocol.Client).
const maxIngestInFlight = 256

// ingestRetryAfter is the Retry-After of a shed ingest request, in seconds:
// long enough for the queue ahead to drain many times over.
const ingestRetryAfter = "1"

// signed registers rt (a row of ingest.Routes) behind protocol-v1
// authentication with a body bound of rt.MaxBody bytes: rt.Handler runs
// only on a request Authenticate verified. Every outcome is counted by
// route and result. Beyond maxIngestInFlight requests at once (over the
// whole group) a request is shed: 503 overloaded with Retry-After, counted,
// nothing read or written.
func (s *Server) signed(rt ingest.Route) {
	pattern := rt.Path
	s.handle(GroupIngest, rt.Method, pattern, func(w http.ResponseWriter, r *http.Request) {
		if s.ingestInFlight.Add(1) > s.ingestLimit {
			s.ingestInFlight.Add(-1)
			s.m.shed.Inc()
			w.Header().Set("Retry-After", ingestRetryAfter)
			writeError(w, http.StatusServiceUnavailable, "overloaded", "too many ingest requests in progress; retry later")
			return
		}
		defer s.ingestInFlight.Add(-1)
		v, refusal := s.ingest.Authenticate(r, rt.MaxBody)
		var resp ingest.Response
		switch {
		case refusal != nil:
			resp = *refusal
		case pattern != ingest.HeartbeatRoute && s.disk.Check().Low:
			// The free-space guard (docs/operations.md, "Quotas"):
			// heartbeats are small and keep deadlines true; everything
			// else waits until the operator makes room.
			resp = diskLowRefusal()
			resp.Shared = v.Shared()
		default:
			resp = rt.Handler(s.ingest, r.Context(), v)
		}
		s.m.ingest.WithLabelValues(pattern, resp.Result()).Inc()
		if resp.Shared {
			s.m.sharedKey.Inc()
			w.Header().Set("Deprecation", sharedKeyDeprecation)
		}
		if resp.Refusal != nil {
			if q := resp.Refusal.Quota; q != "" {
				s.m.quotaRefused.WithLabelValues(q).Inc()
			}
			if resp.Refusal.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(resp.Refusal.RetryAfter))
			}
			writeError(w, resp.Status, resp.Refusal.Code, resp.Refusal.Message)
			return
		}
		writeJSON(w, resp.Status, resp.Body)
	})
}

// statusRecorder captures the status code and size for logs and metrics.
type statusRecorder struct {
	http.ResponseWriter
	code  int
	bytes int
}

// WriteHeader records the first status code written.
func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (a long
// operation extends its write deadline).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Write counts the bytes written (an implicit 200 if no header was written).
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += n
	return n, err
}

// headerBytes is the size of r's request line and header lines as sent,
// reconstructed from what net/http parsed ("Name: value\r\n" per value,
// Host included); whitespace net/http trimmed is not counted.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// wrap adds the request id, the access log line and the metrics. The log
// line carries method, route pattern, status, duration and size: never a
// header, a query string or a body. Latency is wall time on the monotonic
// clock, not the injected one. A request whose line and headers exceed
// maxHeaderBytes is answered 431 headers_too_large here, before any
// authentication (docs/operations.md, "HTTP surface and errors").
func (s *Server) wrap(pattern string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := ulid.Make().String()
		w.Header().Set("X-Request-Id", id)
		// Nothing chalupa serves belongs in a search index
		// (docs/operations.md, "Console").
		w.Header().Set("X-Robots-Tag", "noindex, nofollow")
		rec := &statusRecorder{ResponseWriter: w}
		if headerBytes(r) > maxHeaderBytes {
			writeError(rec, http.StatusRequestHeaderFieldsTooLarge, "headers_too_large", fmt.Sprintf("request line and headers exceed %d KiB", maxHeaderBytes>>10))
		} else {
			h(rec, r)
		}
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		d := time.Since(start)
		s.m.observe(pattern, r.Method, rec.code, d)
		group := groupOf(r.URL.Path)
		if group == "" {
			group = groupUnrouted
		}
		s.stats.observe(group, rec.code, d)
		ev := s.log.Info()
		if rec.code >= 500 {
			ev = s.log.Warn()
		}
		ev.Str("request_id", id).Str("method", knownMethod(r.Method)).Str("route", pattern).
			Int("status", rec.code).Dur("took", d).Int("bytes", rec.bytes).Msg("request")
	}
}

// tokenEqual compares a presented bearer with the expected one in constant
// time. Both sides are hashed first so that neither the content nor the
// length of the secret leaks through timing.
func tokenEqual(presented, expected string) bool {
	if expected == "" {
		return false
	}
	a := sha256.Sum256([]byte(presented))
	b := sha256.Sum256([]byte(expected))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// bearerToken extracts the token of an "Authorization: Bearer …" header.
func bearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const p = "Bearer "
	if len(h) > len(p) && strings.EqualFold(h[:len(p)], p) {
		return strings.TrimSpace(h[len(p):])
	}
	return ""
}

// bearer guards h with the given token. A missing or wrong token is 401 with
// no detail about which. Cookies never authenticate.
func bearer(token Secret, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !tokenEqual(bearerToken(r), token.Reveal()) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="chalupa"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "missing or invalid bearer token")
			return
		}
		h(w, r)
	}
}
