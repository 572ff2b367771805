package daemon

import (
	"net/http"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/ingest"
)

// sharedKeyDeprecation is the Deprecation header (RFC 9745) sent on the
// shared-key path: deprecated since 2026-01-01T00:00:00Z, when
// per-environment keys replaced it (seed 002, "Ingest key lifecycle").
const sharedKeyDeprecation = "@1767225600"

func (s *Server) ingestRoutes() []route {
	return []route{
		{"POST", "/api/ingest/heartbeat", s.ingestHandler("/api/ingest/heartbeat", s.ingest.Heartbeat)},
	}
}

// ingestHandler writes an ingest.Response and counts its outcome.
func (s *Server) ingestHandler(name string, fn func(*http.Request) ingest.Response) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp := fn(r)
		s.m.ingest.WithLabelValues(name, resp.Result()).Inc()
		if resp.Shared {
			s.m.sharedKey.Inc()
			w.Header().Set("Deprecation", sharedKeyDeprecation)
		}
		if resp.Refusal != nil {
			writeJSON(w, resp.Status, adminapi.ErrorBody{Error: adminapi.ErrorDetail{Code: resp.Refusal.Code, Message: resp.Refusal.Message}})
			return
		}
		writeJSON(w, resp.Status, resp.Body)
	}
}
