package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	_ "modernc.org/sqlite" // chalupa's driver

	"github.com/chalupa-run/chalupa/contrib/internal/harness"
)

// readerDSN opens the database file read-only (mode=ro) with a busy timeout,
// on chalupa's driver: a second, independent connection like an operator's
// sqlite3 shell or a backup script would hold.
func readerDSN(path string) string {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(5000)")
	return "file:" + path + "?" + q.Encode()
}

// holdRead opens a read transaction on path (BEGIN; a SELECT over the
// heartbeats, which fixes the transaction's snapshot of the WAL) and returns
// once it holds it; release ends it (ROLLBACK) and closes the connection.
func holdRead(ctx context.Context, path string) (rows int64, release func() error, err error) {
	db, err := sql.Open("sqlite", readerDSN(path))
	if err != nil {
		return 0, nil, err
	}
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		db.Close()
		return 0, nil, fmt.Errorf("BEGIN: %w", err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM heartbeats").Scan(&rows); err != nil {
		tx.Rollback()
		db.Close()
		return 0, nil, fmt.Errorf("SELECT: %w", err)
	}
	return rows, func() error {
		err := tx.Rollback()
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		return err
	}, nil
}

// span is one named stretch of the longreader run.
type span struct {
	name     string
	from, to time.Time
	p99Ms    float64
	ok, errs int64
	rate     float64
}

func runLongReader(args []string) error {
	fs := flag.NewFlagSet("longreader", flag.ContinueOnError)
	var c common
	c.register(fs)
	hold := fs.Duration("hold", 60*time.Second, "how long the read transaction is held")
	rate := fs.Float64("rate", 500, "steady signed heartbeats per second, throughout")
	before := fs.Duration("before", 15*time.Second, "steady writes before the reader begins")
	after := fs.Duration("after", 30*time.Second, "steady writes after the reader ends")
	quiet := fs.Duration("quiet", 60*time.Second, "idle time watched after the writes stop")
	every := fs.Duration("sample", 100*time.Millisecond, "WAL size sampling interval")
	deployments := fs.Int("deployments", 500, "deployment ids the heartbeats are spread over")
	bucket := fs.Duration("timeline", 5*time.Second, "timeline resolution (largest WAL size per bucket)")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	switch {
	case *hold <= 0 || *hold > time.Hour:
		return errors.New("-hold must be in (0, 1h]")
	case !(*rate > 0 && *rate <= 20_000):
		return errors.New("-rate must be in (0, 20000]")
	case *before <= 0 || *after <= 0 || *before > time.Hour || *after > time.Hour:
		return errors.New("-before and -after must be in (0, 1h]")
	case *quiet < 0 || *quiet > time.Hour:
		return errors.New("-quiet must be in [0, 1h]")
	case *every < 10*time.Millisecond || *every > time.Minute:
		return errors.New("-sample must be in [10ms, 1m]")
	case *deployments < 1 || *deployments > 1_000_000:
		return errors.New("-deployments must be in [1, 1000000]")
	case *bucket <= 0:
		return errors.New("-timeline must be positive")
	}
	ctx, cancel := runContext(*before + *hold + *after + *quiet + 2*harness.ChalupaStopGrace + 10*time.Minute)
	defer cancel()

	s, err := c.start(ctx, "longreader")
	if err != nil {
		return err
	}
	defer s.close()
	keyID, key, err := s.IssueKey(ctx, "soak-longreader")
	if err != nil {
		return err
	}
	w, err := harness.NewWorkload(s.URL, keyID, key, "soak-longreader", *deployments, 256, 10*time.Second)
	if err != nil {
		return err
	}
	defer w.Close()

	wal := s.DBPath() + "-wal"
	watch := watchWAL(ctx, wal, *every)
	start := time.Now()
	// steady runs open-loop writes for d and records them as a span.
	steady := func(name string, d time.Duration) span {
		progress("longreader: %s: %.0f heartbeats/s for %s", name, *rate, d)
		from := time.Now()
		t, _ := harness.RunSteady(ctx, w, nopWindow{}, *rate, 0, d, 2048)
		return span{name: name, from: from, to: time.Now(), p99Ms: ms(t.Lat.Quantile(0.99)), ok: t.OK, errs: t.Non2xx + t.Transport,
			rate: float64(t.OK) / d.Seconds()}
	}
	var spans []span
	spans = append(spans, steady("before", *before))
	if err := ctx.Err(); err != nil {
		return err
	}
	rows, release, err := holdRead(ctx, s.DBPath())
	if err != nil {
		return fmt.Errorf("long reader: %w", err)
	}
	progress("longreader: read transaction open (its snapshot has %d heartbeats)", rows)
	spans = append(spans, steady("reader held", *hold))
	if err := release(); err != nil {
		return fmt.Errorf("long reader: end: %w", err)
	}
	progress("longreader: read transaction ended")
	spans = append(spans, steady("after", *after))
	qFrom := time.Now()
	progress("longreader: quiet for %s", *quiet)
	harness.SleepUntil(ctx, qFrom.Add(*quiet))
	spans = append(spans, span{name: "quiet", from: qFrom, to: time.Now()})
	if err := ctx.Err(); err != nil {
		return err
	}
	samples := watch.samples()

	out := os.Stdout
	fmt.Fprintf(out, "longreader: chalupa %s, pid %d%s; %.0f signed heartbeats/s open loop; a second connection (modernc.org/sqlite, mode=ro) holds BEGIN + SELECT count(*) FROM heartbeats for %s; %s sampled every %s\n\n",
		s.URL, s.PID(), placement(c.cpus), *rate, *hold, wal, *every)
	fmt.Fprintf(out, "%-12s  %8s  %12s  %12s  %12s  %12s  %10s  %8s  %10s\n", "span", "length", "WAL first", "WAL max", "WAL last", "growth", "2xx/s", "errors", "p99 ms")
	for _, sp := range spans {
		st := statsBetween(samples, sp.from, sp.to)
		load := fmt.Sprintf("%10.0f  %8d  %10.2f", sp.rate, sp.errs, sp.p99Ms)
		if sp.name == "quiet" {
			load = fmt.Sprintf("%10s  %8s  %10s", "-", "-", "-")
		}
		fmt.Fprintf(out, "%-12s  %7.0fs  %12s  %12s  %12s  %12s  %s\n", sp.name, sp.to.Sub(sp.from).Seconds(),
			mib(st.first), mib(st.max), mib(st.last), signedMiB(st.last-st.first), load)
	}
	hold0 := statsBetween(samples, spans[1].from, spans[1].to)
	fmt.Fprintf(out, "\nWAL growth while the reader held its snapshot: %s in %s (%s/min)\n", signedMiB(hold0.last-hold0.first),
		*hold, signedMiB(int64(float64(hold0.last-hold0.first)/hold.Minutes())))
	fin := statsBetween(samples, spans[3].from, spans[3].to.Add(time.Second))
	fmt.Fprintf(out, "WAL at the end: %s (largest of the run %s)\n", mib(fin.last), mib(statsBetween(samples, start, time.Now()).max))
	printShrinks(out, samples, start)
	fmt.Fprintln(out)
	printTimeline(out, samples, start, *bucket, func(at time.Time) string {
		for _, sp := range spans {
			if !at.Before(sp.from) && at.Before(sp.to) {
				return sp.name
			}
		}
		return ""
	})
	return nil
}

// nopWindow is a harness.Window that samples nothing.
type nopWindow struct{}

// Start does nothing.
func (nopWindow) Start() {}

// End does nothing.
func (nopWindow) End() {}

// signedMiB is mib with a sign: "+8.28 MiB", "-593.44 MiB", "0 bytes".
func signedMiB(b int64) string {
	switch {
	case b > 0:
		return "+" + mib(b)
	case b < 0:
		return "-" + mib(-b)
	}
	return mib(b)
}
