package daemon

import (
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/storage"
)

// LogsConfig is the log broker's bucket and credentials (CHALUPA_LOGS_*;
// "" URL leaves the log routes off: docs/operations.md, "Logs").
type LogsConfig struct {
	// URL is CHALUPA_LOGS_URL, the bucket and prefix.
	URL string
	// Key and Secret are CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET.
	Key, Secret Secret
	// Location is URL parsed (zero when unset).
	Location logs.Location `json:"-"`
	// Retention is the age past which retention removes log chunks
	// (CHALUPA_LOGS_RETENTION; logs.DefaultRetention).
	Retention time.Duration
}

// logsURLText prints CHALUPA_LOGS_URL, or says the log routes are off.
func logsURLText(s string) string {
	if s == "" {
		return "(unset: log routes answer 503 logs_not_configured)"
	}
	return redactURL(s)
}

// validateLogs checks CHALUPA_LOGS_* (docs/operations.md, "Logs"). The log
// broker deletes objects (retention, erase), so it must never hold the
// replica's credentials nor write where the replica does: a mistake there
// could delete the database's only off-site copy.
func (c *Config) validateLogs(l *loader) {
	g := &c.Logs
	if g.URL == "" {
		if g.Key != "" || g.Secret != "" {
			l.bad("CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET are set but CHALUPA_LOGS_URL is not")
		}
		return
	}
	loc, err := logs.ParseLocation(g.URL)
	if err != nil {
		l.bad("CHALUPA_LOGS_URL: %v", err)
		return
	}
	g.Location = loc
	if g.Key == "" || g.Secret == "" {
		l.bad("CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET are required with CHALUPA_LOGS_URL")
		return
	}
	r := c.Replica
	if (r.SpacesKey != "" && g.Key == r.SpacesKey) || (r.SpacesSecret != "" && g.Secret == r.SpacesSecret) {
		l.bad("CHALUPA_LOGS_KEY and CHALUPA_LOGS_SECRET must differ from CHALUPA_SPACES_KEY and CHALUPA_SPACES_SECRET: log retention and erase delete objects and must never hold credentials that can delete the database replica")
	}
	if bucket, p, ok := storage.ReplicaBucketPath(r.URL); ok && loc.Overlaps(bucket, p) {
		l.bad("CHALUPA_LOGS_URL overlaps CHALUPA_REPLICA_URL (same bucket, one path within the other): log retention and erase delete objects and must never reach the database replica")
	}
}

// newLogBroker returns the log broker on CHALUPA_LOGS_URL with the log
// credentials alone, or nil when it is unset (docs/operations.md, "Logs").
func newLogBroker(c *Config, clock clockwork.Clock) *logs.Broker {
	if c.Logs.URL == "" {
		return nil
	}
	store := logs.NewS3(c.Logs.Location, c.Logs.Key.Reveal(), c.Logs.Secret.Reveal(), clock)
	return logs.NewBroker(store, c.Logs.Location, logs.Limits{})
}

// logRetention is the log retention loop, holding only the log store
// (nil without CHALUPA_LOGS_URL).
func (s *Server) logRetention() *logs.Retention {
	if s.logs == nil {
		return nil
	}
	return &logs.Retention{DB: s.db, Store: s.logs.Store(), Clock: s.clock, Log: s.log, Age: s.cfg.Logs.Retention}
}
