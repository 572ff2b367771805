package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
	"github.com/chalupa-run/chalupa/contrib/internal/harness"
	"github.com/chalupa-run/chalupa/storage"
)

// runAlertLatency measures the time from a condition's start (the
// detector's Set call) to the webhook receiver taking the request:
// the real alerter worker (Run, as serve runs it) over a real SQLite file,
// the real webhook sink signing the json body, and a loopback http receiver
// in this process. Each sample is a quiet sink's first message — a fresh
// database — so it includes alerter.Settle (the wait for a storm's other
// conditions) and nothing of the storm and rate rules, which only apply to
// messages that follow others (docs/operations.md, "Alerts").
func runAlertLatency(args []string) error {
	fs := flag.NewFlagSet("alertlatency", flag.ContinueOnError)
	samples := fs.Int("samples", 40, "how many conditions, each on a fresh database")
	cpus := fs.String("cpus", "", "pin this process with taskset -c LIST first (e.g. 0): re-runs itself under taskset")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *samples < 1 || *samples > 1000 {
		return errors.New("-samples must be in [1, 1000]")
	}
	if *cpus != "" {
		list, err := harness.ParseCPUList(*cpus)
		if err != nil {
			return fmt.Errorf("-cpus: %w", err)
		}
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cmd, err := harness.Command(list, exe, "alertlatency", "-samples", fmt.Sprint(*samples))
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd.Run()
	}
	ctx, cancel := runContext(time.Duration(*samples)*(alerter.Settle+alerter.SendTimeout+10*time.Second) + time.Minute)
	defer cancel()

	arrived := make(chan time.Time, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
		select {
		case arrived <- at:
		default:
		}
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	sink, err := webhook.New(webhook.Config{URL: "http://" + ln.Addr().String() + "/hooks/soak",
		Secret: webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "chalupa-soak-alertlatency-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Migrated once; each sample starts from a copy (migrating is not
	// what is measured).
	image, err := alertLatencyImage(ctx, filepath.Join(dir, "template", "chalupa.db"))
	if err != nil {
		return err
	}
	var lat []time.Duration
	for i := 0; i < *samples && ctx.Err() == nil; i++ {
		path := filepath.Join(dir, fmt.Sprintf("s%03d", i), "chalupa.db")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, image, 0o600); err != nil {
			return err
		}
		d, err := alertLatencyOne(ctx, path, sink, arrived)
		if err != nil {
			return fmt.Errorf("sample %d: %w", i+1, err)
		}
		lat = append(lat, d)
		progress("alertlatency: %d/%d: %s", i+1, *samples, d.Round(time.Millisecond))
	}
	if len(lat) == 0 {
		return ctx.Err()
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))+0.5)-1)] }
	fmt.Printf("alertlatency: %d conditions, each a quiet sink's first message (fresh SQLite file), alerter.Run with the json webhook sink to a loopback receiver; GOMAXPROCS %d\n",
		len(lat), runtime.GOMAXPROCS(0))
	fmt.Printf("from the Set call to the receiver taking the request: p50 %s, p95 %s, max %s (alerter.Settle %s included; target p95 ≤ 5 s)\n",
		q(0.50).Round(time.Millisecond), q(0.95).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), alerter.Settle)
	return nil
}

// alertLatencyImage is the content of a database at path with every
// migration applied.
func alertLatencyImage(ctx context.Context, path string) ([]byte, error) {
	db, err := storage.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	if _, err := db.Migrate(ctx, storage.MigrateOptions{Logger: zerolog.Nop()}); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.Close(); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// alertLatencyOne opens a database at path, runs an alerter over it with
// sink, sets one condition and returns the time until arrived reports the
// receiver's request.
func alertLatencyOne(ctx context.Context, path string, sink alerts.Sink, arrived <-chan time.Time) (time.Duration, error) {
	db, err := storage.Open(ctx, path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	a, err := alerter.New(alerter.Config{DB: db, Sinks: []alerts.Sink{sink}, Log: zerolog.Nop()})
	if err != nil {
		return 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() { stop(); <-done }()
	start := time.Now()
	if err := a.Set(ctx, alerts.KindReaperTokenRefused, alerts.Subject{Kind: alerts.SubjectPlatform}, true, "soak: a refused write token"); err != nil {
		return 0, err
	}
	select {
	case at := <-arrived:
		return at.Sub(start), nil
	case <-time.After(alerter.Settle + alerter.SendTimeout + 10*time.Second):
		return 0, errors.New("the receiver took no request")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
