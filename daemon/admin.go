package daemon

import (
	"errors"
	"net/http"
	"regexp"
	"unicode"
	"unicode/utf8"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// slugPattern is an environment slug (DNS-label-like, 2–63 characters).
var slugPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,62}$`)

// adminHandlers maps each operation id to its handler. Several operations
// may share a route (the ingest-keys endpoint); routes are registered once.
func (s *Server) adminHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		adminapi.OpGetStatus:         s.handleStatus,
		adminapi.OpCreateEnvironment: s.handleCreateEnvironment,
		adminapi.OpListEnvironments:  s.handleListEnvironments,
		adminapi.OpIssueIngestKey:    s.handleIngestKeys,
		adminapi.OpRotateIngestKey:   s.handleIngestKeys,
		adminapi.OpRevokeIngestKey:   s.handleIngestKeys,
		adminapi.OpListFleet:         s.handleFleet,
	}
}

// adminRoutes registers every operation in adminapi.Operations that has a
// handler, guarded by the admin bearer.
func (s *Server) adminRoutes() []route {
	hs := s.adminHandlers()
	seen := map[string]bool{}
	var rs []route
	for _, op := range adminapi.Operations {
		h, ok := hs[op.ID]
		key := op.Method + " " + op.Path
		if !ok || seen[key] {
			continue
		}
		seen[key] = true
		rs = append(rs, route{op.Method, op.Path, s.bearer(s.cfg.AdminToken, h)})
	}
	return rs
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	v, err := s.db.SchemaVersion(r.Context())
	if err != nil {
		s.internal(w, r, "read schema version", err)
		return
	}
	h := s.repl.Health(s.clock.Now())
	writeJSON(w, http.StatusOK, adminapi.Status{
		Version:       Version,
		StartedAt:     s.started.UTC(),
		UptimeSeconds: s.clock.Since(s.started).Seconds(),
		SchemaVersion: v,
		DBSizeBytes:   s.db.Size(),
		Replication:   h,
	})
}

func (s *Server) handleCreateEnvironment(w http.ResponseWriter, r *http.Request) {
	var req adminapi.CreateEnvironmentRequest
	if !decodeAdmin(w, r, &req) {
		return
	}
	if !slugPattern.MatchString(req.Slug) {
		writeError(w, http.StatusBadRequest, "invalid_slug", "slug must match ^[a-z0-9][a-z0-9-]{1,62}$")
		return
	}
	if req.Name == "" {
		req.Name = req.Slug
	}
	if len(req.Name) > 200 {
		writeError(w, http.StatusBadRequest, "invalid_name", "name must be at most 200 bytes")
		return
	}
	if !displayableName(req.Name) {
		writeError(w, http.StatusBadRequest, "invalid_name", "name must be valid UTF-8 without control or bidi characters")
		return
	}
	var env storage.Environment
	err := s.db.Writer.Do(r.Context(), func(tx storage.Tx) error {
		var err error
		env, err = storage.CreateEnvironment(r.Context(), tx, req.Slug, req.Name, s.clock.Now())
		return err
	})
	if errors.Is(err, storage.ErrConflict) {
		writeError(w, http.StatusConflict, "environment_exists", "an environment with this slug already exists")
		return
	}
	if err != nil {
		s.internal(w, r, "create environment", err)
		return
	}
	writeJSON(w, http.StatusCreated, toAPIEnvironment(env))
}

// displayableName reports whether name is safe to print on an operator's
// terminal: valid UTF-8, no control characters (NUL, ESC, newline, DEL, C1)
// and no bidi controls (U+202E and kin reorder what the operator reads).
// encoding/json turns invalid UTF-8 in a request into U+FFFD, so that rune
// is refused too: it is what invalid bytes sent by a client look like here.
func displayableName(name string) bool {
	if !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return false
		}
	}
	return true
}

func (s *Server) handleListEnvironments(w http.ResponseWriter, r *http.Request) {
	envs, err := storage.ListEnvironments(r.Context(), s.db.Read)
	if err != nil {
		s.internal(w, r, "list environments", err)
		return
	}
	out := adminapi.EnvironmentList{Environments: make([]adminapi.Environment, 0, len(envs))}
	for _, e := range envs {
		out.Environments = append(out.Environments, toAPIEnvironment(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func toAPIEnvironment(e storage.Environment) adminapi.Environment {
	return adminapi.Environment{Slug: e.Slug, Name: e.Name, Status: e.Status, CreatedAt: e.CreatedAt}
}

// internal logs err server-side (it may hold SQL text) and answers a
// redacted 500.
func (s *Server) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	s.log.Error().Str("request_id", w.Header().Get("X-Request-Id")).Str("op", what).Err(err).Msg("request failed")
	writeError(w, http.StatusInternalServerError, "internal", "internal error")
}
