package storage_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestJobStepJournal: claims, progress reports, releases and finishes are
// journaled in order with the job's status and attempt after each, a
// refused progress (another worker's) journals nothing, and a job keeps at
// most MaxJobSteps steps, the newest (docs/operations.md, "Jobs").
func TestJobStepJournal(t *testing.T) {
	db := storagetest.NewDB(t)
	box := storagetest.Box(t, db, storage.Box{})
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	do := func(fn storage.TxFunc) error { return db.Writer.Do(t.Context(), fn) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	steps := func(id string) []storage.JobStep {
		t.Helper()
		s, err := storage.JobSteps(t.Context(), db.Read, id)
		must(err)
		return s
	}
	must(do(func(tx storage.Tx) error {
		_, err := storage.EnqueueJob(t.Context(), tx, "J1", "box", box.ID, "up", false, at)
		return err
	}))
	t.Run("lifecycle", func(t *testing.T) {
		must(do(func(tx storage.Tx) error {
			if _, err := storage.ClaimNextJob(t.Context(), tx, "w1", at.Add(time.Second)); err != nil {
				return err
			}
			if err := storage.SetJobProgress(t.Context(), tx, "J1", "w1", json.RawMessage(`{"message":"creating droplet"}`), at.Add(2*time.Second)); err != nil {
				return err
			}
			if _, err := storage.ReleaseJob(t.Context(), tx, "J1", "w1", 3, "lease expired", at.Add(3*time.Second)); err != nil {
				return err
			}
			if _, err := storage.ClaimNextJob(t.Context(), tx, "w2", at.Add(4*time.Second)); err != nil {
				return err
			}
			return storage.FinishJob(t.Context(), tx, "J1", "w2", storage.JobFailed, nil, "droplet quota", at.Add(5*time.Second))
		}))
		// Another worker's report is refused and journals nothing.
		err := do(func(tx storage.Tx) error {
			return storage.SetJobProgress(t.Context(), tx, "J1", "w1", json.RawMessage(`{}`), at.Add(6*time.Second))
		})
		if !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("stale progress: %v", err)
		}
		want := []string{
			"1 claimed running 1 w1 ",
			`2 progress running 1 w1 {"message":"creating droplet"}`,
			"3 released queued 1 w1 lease expired",
			"4 claimed running 2 w2 ",
			"5 finished failed 2 w2 droplet quota",
		}
		got := steps("J1")
		if len(got) != len(want) {
			t.Fatalf("steps %+v, want %d", got, len(want))
		}
		for i, s := range got {
			line := fmt.Sprintf("%d %s %s %d %s %s", s.Seq, s.Kind, s.Status, s.Attempt, s.Worker, s.Detail)
			if line != want[i] || !s.At.Equal(at.Add(time.Duration(i+1)*time.Second)) {
				t.Errorf("step %d: %q at %s, want %q", i, line, s.At, want[i])
			}
		}
	})
	t.Run("bounded", func(t *testing.T) {
		must(do(func(tx storage.Tx) error {
			_, err := storage.EnqueueJob(t.Context(), tx, "J2", "box", box.ID, "up", false, at)
			if err != nil {
				return err
			}
			if _, err := storage.ClaimNextJob(t.Context(), tx, "w3", at); err != nil {
				return err
			}
			for i := range storage.MaxJobSteps + 10 {
				if err := storage.SetJobProgress(t.Context(), tx, "J2", "w3", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), at); err != nil {
					return err
				}
			}
			return nil
		}))
		got := steps("J2")
		if len(got) != storage.MaxJobSteps || got[0].Seq != 12 || got[len(got)-1].Seq != storage.MaxJobSteps+11 {
			t.Fatalf("%d steps, seq %d..%d; want the newest %d", len(got), got[0].Seq, got[len(got)-1].Seq, storage.MaxJobSteps)
		}
		if len(steps("J1")) != 5 {
			t.Fatal("pruning one job's journal touched another's")
		}
	})
	if s := steps("nope"); len(s) != 0 {
		t.Fatalf("unknown job: %+v", s)
	}
}
