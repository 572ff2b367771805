package daemon

// SetIngestInFlightLimit lowers the signed-ingest in-flight bound of s, so a
// test can fill it with a handful of requests.
func SetIngestInFlightLimit(s *Server, n int64) { s.ingestLimit = n }

// IngestInFlight is the number of signed-ingest requests s is serving.
func IngestInFlight(s *Server) int64 { return s.ingestInFlight.Load() }
