package daemon

import (
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/wake"
)

// SetIngestInFlightLimit lowers the signed-ingest in-flight bound of s, so a
// test can fill it with a handful of requests.
func SetIngestInFlightLimit(s *Server, n int64) { s.ingestLimit = n }

// IngestInFlight is the number of signed-ingest requests s is serving.
func IngestInFlight(s *Server) int64 { return s.ingestInFlight.Load() }

// QuotaEvents is the queue of quota warnings s's ingest service noted (the
// quota-events loop drains it; a test records them itself).
func QuotaEvents(s *Server) <-chan ingest.QuotaEvent { return s.ingest.QuotaEvents() }

// DeadlineActivity is s's heartbeat → reaper wake-up signal.
func DeadlineActivity(s *Server) *wake.Threshold { return s.ingest.DeadlineActivity() }
