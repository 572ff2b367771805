// Package daemon wires chalupa's process: configuration, the HTTP server and
// its routes (httprouter), the admin API, the supervisor that runs every
// background loop, and the shutdown order (DESIGN.md, "Layout").
package daemon

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/julienschmidt/httprouter"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// Version is the build's version, set with -ldflags "-X …/daemon.Version=v1.2.3".
var Version = "dev"

// Server is the HTTP side of a running daemon.
type Server struct {
	cfg     *Config
	db      *storage.DB
	repl    *storage.Replicator
	keys    *ingest.Keyring
	ingest  *ingest.Service
	log     zerolog.Logger
	m       *metrics
	started time.Time
	clock   clockwork.Clock
	router  *httprouter.Router
}

// Deps are what a Server serves: an opened, migrated database, its running
// replicator, and the ingest key ring (proven against the master key).
type Deps struct {
	Config     *Config
	DB         *storage.DB
	Replicator *storage.Replicator
	Keys       *ingest.Keyring
	Log        zerolog.Logger
	// Clock judges X-Chalupa-Timestamp skew, stamps writes and measures
	// uptime; nil means the real clock.
	Clock clockwork.Clock
}

// route is one registered route: pattern for metrics and logs, and its handler.
type route struct {
	method, pattern string
	h               http.HandlerFunc
}

// NewServer builds the server and its routes.
func NewServer(d Deps) *Server {
	clock := d.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	s := &Server{cfg: d.Config, db: d.DB, repl: d.Replicator, keys: d.Keys, log: d.Log, started: clock.Now(), clock: clock}
	var shared []byte
	if d.Config.IngestKey != "" {
		shared = []byte(d.Config.IngestKey.Reveal())
	}
	s.ingest = ingest.NewService(ingest.Config{DB: d.DB, Keys: d.Keys, SharedKey: shared, Clock: clock, Log: d.Log})
	s.m = newMetrics(s)
	s.router = httprouter.New()
	s.router.RedirectTrailingSlash = false
	s.router.RedirectFixedPath = false
	s.router.HandleMethodNotAllowed = true
	// httprouter answers OPTIONS itself by default, outside wrap: no
	// request id, log line or metric. Nothing here serves CORS.
	s.router.HandleOPTIONS = false
	s.router.NotFound = s.wrap("notfound", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such route")
	})
	s.router.MethodNotAllowed = s.wrap("notallowed", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this route")
	})
	s.router.PanicHandler = func(w http.ResponseWriter, r *http.Request, v any) {
		s.log.Error().Str("request_id", w.Header().Get("X-Request-Id")).Interface("panic", v).Msg("handler panicked")
		writeError(w, http.StatusInternalServerError, "internal", "internal error")
	}
	for _, rt := range s.routes() {
		s.handle(rt.method, rt.pattern, rt.h)
	}
	return s
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler { return s.router }

func (s *Server) handle(method, pattern string, h http.HandlerFunc) {
	s.router.Handler(method, pattern, s.wrap(pattern, h))
}

func (s *Server) routes() []route {
	rs := []route{
		{"GET", "/api/health", s.handleHealth},
		{"GET", "/api/ready", s.bearer(s.cfg.ReadyToken, s.handleReady)},
		{"GET", "/metrics", s.bearer(s.cfg.ReadyToken, promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}).ServeHTTP)},
	}
	rs = append(rs, s.ingestRoutes()...)
	return append(rs, s.adminRoutes()...)
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

// Write counts the bytes written (an implicit 200 if no header was written).
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += n
	return n, err
}

// wrap adds the request id, the access log line and the metrics. The log
// line carries method, route pattern, status, duration and size: never a
// header, a query string or a body.
func (s *Server) wrap(pattern string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := ulid.Make().String()
		w.Header().Set("X-Request-Id", id)
		rec := &statusRecorder{ResponseWriter: w}
		h(rec, r)
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		d := time.Since(start)
		s.m.observe(pattern, r.Method, rec.code, d)
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
func (s *Server) bearer(token Secret, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !tokenEqual(bearerToken(r), token.Reveal()) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="chalupa"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "missing or invalid bearer token")
			return
		}
		h(w, r)
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReady answers {"status":"ready"} when the database answers and
// replication is not failing, else a redacted 503 (seed 002, "Health and
// readiness": no URLs, key names, SQL errors or fleet data).
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if err := s.db.Ping(r.Context()); err != nil {
		s.log.Warn().Str("check", "database").Msg("readiness failed")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
		return
	}
	if s.repl.Health(s.clock.Now()).Failing {
		s.log.Warn().Str("check", "replication").Msg("readiness failed")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
