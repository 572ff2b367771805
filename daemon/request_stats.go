package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/storage"
)

// flushTimeout bounds one write of an hour's request statistics: it runs
// off the request path (or at shutdown), and a writer stuck longer than
// this has bigger problems than a lost hour of counts.
const flushTimeout = 30 * time.Second

// requestStats accumulates the current hour's request counts and latency
// buckets by route group and writes them, with the process's wall and CPU
// time and the database and WAL sizes, at most once an hour and only for
// hours that had traffic (docs/operations.md, "Operations report"). It owns
// no timer and no goroutine: the first request of a new hour hands the
// previous hour to the writer, and shutdown (flush) writes the last one. An
// idle daemon writes nothing and schedules nothing.
type requestStats struct {
	db    *storage.DB
	clock clockwork.Clock
	log   zerolog.Logger
	// cpu is the process's CPU time so far (processCPU; tests inject).
	cpu func() time.Duration

	mu sync.Mutex
	// hour is the UTC hour being counted; zero: no request since the last
	// write.
	hour   time.Time
	groups map[string]*storage.RequestHour
	// since and sinceCPU are when (and at what CPU time) the previous row
	// was taken, or the process started.
	since    time.Time
	sinceCPU time.Duration
	// writes tracks hand-offs still writing, so flush waits for them.
	writes sync.WaitGroup
}

func newRequestStats(db *storage.DB, clock clockwork.Clock, log zerolog.Logger, cpu func() time.Duration) *requestStats {
	return &requestStats{db: db, clock: clock, log: log, cpu: cpu, since: clock.Now(), sinceCPU: cpu()}
}

// observe counts one request of group that was answered code after d. The
// first request of a new hour hands the previous hour to the writer (not
// waited for).
func (r *requestStats) observe(group string, code int, d time.Duration) {
	now := r.clock.Now()
	hour := now.UTC().Truncate(time.Hour)
	r.mu.Lock()
	if !r.hour.IsZero() && !hour.Equal(r.hour) {
		p, reqs := r.take(now)
		r.writes.Add(1)
		go func() {
			defer r.writes.Done()
			r.write(p, reqs)
		}()
	}
	if r.hour.IsZero() {
		r.hour = hour
		r.groups = map[string]*storage.RequestHour{}
	}
	g := r.groups[group]
	if g == nil {
		g = &storage.RequestHour{HourStart: hour, Group: group, Buckets: make([]int64, len(storage.RequestLatencyBounds)+1)}
		r.groups[group] = g
	}
	g.Requests++
	if code >= 500 {
		g.ServerErrors++
	}
	g.Buckets[storage.LatencyBucket(d)]++
	r.mu.Unlock()
}

// take returns the counted hour's rows and starts a new interval; r.mu held.
func (r *requestStats) take(now time.Time) (storage.ProcessHour, []storage.RequestHour) {
	cpu := r.cpu()
	dbBytes, walBytes := r.db.Sizes()
	p := storage.ProcessHour{HourStart: r.hour, Wall: now.Sub(r.since), CPU: cpu - r.sinceCPU,
		DBBytes: dbBytes, WALBytes: walBytes, RecordedAt: now}
	reqs := make([]storage.RequestHour, 0, len(r.groups))
	for _, g := range r.groups {
		reqs = append(reqs, *g)
	}
	r.hour, r.groups, r.since, r.sinceCPU = time.Time{}, nil, now, cpu
	return p, reqs
}

// write stores one hour through the writer; a fault is logged (the hour's
// counts are lost, never retried: they are evidence, not data).
func (r *requestStats) write(p storage.ProcessHour, reqs []storage.RequestHour) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if err := r.db.Writer.Do(ctx, func(tx storage.Tx) error { return storage.AddOpsHour(ctx, tx, p, reqs) }); err != nil {
		r.log.Error().Err(err).Msg("write request statistics")
	}
}

// live returns a copy of the hour being counted (not yet written): rows for
// the report. Nil when no request has been counted since the last write.
func (r *requestStats) live() []storage.RequestHour {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]storage.RequestHour, 0, len(r.groups))
	for _, g := range r.groups {
		c := *g
		c.Buckets = append([]int64(nil), g.Buckets...)
		out = append(out, c)
	}
	return out
}

// flush writes the hour being counted, if it had any request, and waits for
// earlier hand-offs: called at shutdown, before the database closes.
func (r *requestStats) flush() {
	r.mu.Lock()
	if !r.hour.IsZero() {
		p, reqs := r.take(r.clock.Now())
		r.mu.Unlock()
		r.write(p, reqs)
	} else {
		r.mu.Unlock()
	}
	r.writes.Wait()
}
