package ingest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/internal/testwait"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// gatedSetter records every report; while gate is set each report waits
// for it, as an alerter stuck on a slow writer would.
type gatedSetter struct {
	gate chan struct{}

	mu    sync.Mutex
	calls []string
}

func (s *gatedSetter) Set(_ context.Context, kind string, subject alerts.Subject, holds bool, detail string) error {
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind != alerts.KindQuotaExceeded || subject.Kind != alerts.SubjectEnvironment || (holds && detail == "") {
		s.calls = append(s.calls, fmt.Sprintf("unexpected %s %+v %v %q", kind, subject, holds, detail))
		return nil
	}
	s.calls = append(s.calls, fmt.Sprintf("%s %v", subject.ID, holds))
	return nil
}

func (s *gatedSetter) reports() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// TestQuotaAlert: a storm of quota refusals in one environment raises
// quota-exceeded once, reported by the quota-events loop and not by the
// refused requests, which return while the alerter is stuck; a refusal
// within QuotaQuiet keeps it, and QuotaQuiet without one ends it. An
// environment's alert an earlier process left open is adopted by the
// re-check at start and ends QuotaQuiet later when no refusal comes
// (docs/operations.md, "Alerts", under Detectors).
func TestQuotaAlert(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	db := storagetest.NewDB(t)
	storagetest.Environment(t, db, storage.Environment{Slug: "demo-harbor"})
	storagetest.Environment(t, db, storage.Environment{Slug: "demo-quay"})
	clock := clockwork.NewFakeClockAt(quotaEpoch)
	s := NewService(Config{DB: db, Clock: clock, Quotas: DefaultQuotas(), Log: zerolog.Nop()})
	set := &gatedSetter{gate: make(chan struct{})}
	w := &QuotaEventWriter{DB: db, Events: s.QuotaEvents(), Service: s, Alerts: set, Log: zerolog.Nop()}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// 8 × 2,000 refusals while the alerter is stuck: each returns.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				s.noteQuota(&Refusal{Quota: QuotaDeploymentHeartbeats}, "demo-harbor", fmt.Sprintf("dep-%d", g))
			}
		}()
	}
	wg.Wait()
	close(set.gate)
	testwait.Eventually(t, testwait.Short, "quota-exceeded raised", func() (bool, string) {
		r := set.reports()
		return len(r) == 1, fmt.Sprint(r)
	})
	if r := set.reports(); r[0] != "demo-harbor true" {
		t.Fatalf("reported %v, want demo-harbor raised", r)
	}
	// The loop then waits for the quiet's end (its warnings recorded).
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, testwait.Short, "the warnings recorded", func() (bool, string) {
		var n int
		_ = db.Read.QueryRowContext(ctx, `SELECT count(*) FROM lifecycle_events WHERE kind = ?`, QuotaEventKind).Scan(&n)
		return n == 8, fmt.Sprint(n, " events")
	})

	clock.Advance(QuotaQuiet - 5*time.Minute)
	s.noteQuota(&Refusal{Quota: QuotaEnvironmentHeartbeats}, "demo-harbor", "") // within the quiet: it still holds
	clock.Advance(5 * time.Minute)                                              // the first quiet's end
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if r := set.reports(); len(r) != 1 {
		t.Fatalf("a refusal within the quiet reported %v, want nothing more", r)
	}
	clock.Advance(QuotaQuiet - 5*time.Minute)
	testwait.Eventually(t, testwait.Short, "quota-exceeded ended", func() (bool, string) {
		r := set.reports()
		return len(r) == 2 && r[1] == "demo-harbor false", fmt.Sprint(r)
	})

	// The re-check at start adopts an open alert: it holds now, and ends
	// QuotaQuiet later without a refusal.
	holds, _, err := s.QuotaAlertCheck(ctx, alerts.Subject{Kind: alerts.SubjectEnvironment, ID: "demo-quay"})
	if err != nil || !holds {
		t.Fatalf("re-check: %v %v, want it to hold", holds, err)
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(QuotaQuiet)
	testwait.Eventually(t, testwait.Short, "the adopted alert ended", func() (bool, string) {
		r := set.reports()
		return len(r) == 3 && r[2] == "demo-quay false", fmt.Sprint(r)
	})
}
