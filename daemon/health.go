package daemon

import "net/http"

// handleHealth answers exactly {"status":"ok"}: it says the process serves
// HTTP and nothing else (docs/operations.md, "HTTP surface and errors").
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReady answers {"status":"ready"} when the database answers, its
// commits are not failing for storage reasons (storage.Writer.Failing) and
// replication is not failing, else a redacted 503: no URLs, key names, SQL
// errors or fleet data (docs/operations.md, "HTTP surface and errors").
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if err := s.db.Ping(r.Context()); err != nil {
		s.log.Warn().Str("check", "database").Msg("readiness failed")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
		return
	}
	if _, failing := s.db.Writer.Failing(); failing {
		// The cause is in admin status, /metrics and the log; the body
		// stays redacted.
		s.log.Warn().Str("check", "storage").Msg("readiness failed")
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
