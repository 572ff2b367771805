package daemon

import (
	"time"

	"github.com/chalupa-run/chalupa/ingest"
)

// SetClockForTest replaces the clock s uses to judge X-Chalupa-Timestamp
// skew and to stamp heartbeats, so that tests can place a timestamp exactly
// 299 or 301 seconds away without racing the wall clock across a second
// boundary. Call it before s serves its first request.
//
// It rebuilds the ingest service in place (the route closures hold the
// *ingest.Service pointer) with the same inputs NewServer gives it.
func SetClockForTest(s *Server, now func() time.Time) {
	s.now = now
	var shared []byte
	if s.cfg.IngestKey != "" {
		shared = []byte(s.cfg.IngestKey.Reveal())
	}
	*s.ingest = *ingest.NewService(ingest.Config{DB: s.db, Keys: s.keys, SharedKey: shared, Now: now, Log: s.log})
}
