package storage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// TestAlertsOneOpenPerKindAndSubject: a second open alert of a kind on a
// subject is refused (ErrConflict); once the first resolves, a new one
// opens.
func TestAlertsOneOpenPerKindAndSubject(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	al := func(id string) storage.Alert {
		return storage.Alert{ID: id, Kind: "disk-low", SubjectKind: "platform", Severity: "critical", OpenedAt: now, LastSentAt: now}
	}
	err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		if err := storage.InsertAlert(ctx, tx, al("a1")); err != nil {
			return err
		}
		if err := storage.InsertAlert(ctx, tx, al("a2")); !errors.Is(err, storage.ErrConflict) {
			return fmt.Errorf("second open alert: %v, want ErrConflict", err)
		}
		if err := storage.ResolveAlert(ctx, tx, "a1", now); err != nil {
			return err
		}
		if err := storage.ResolveAlert(ctx, tx, "a1", now); !errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("resolving a resolved alert: %v, want ErrNotFound", err)
		}
		return storage.InsertAlert(ctx, tx, al("a2"))
	})
	if err != nil {
		t.Fatal(err)
	}
	open, err := storage.OpenAlertFor(ctx, db.Read, "disk-low", "platform", "")
	if err != nil || open.ID != "a2" {
		t.Fatalf("open alert %+v %v, want a2", open, err)
	}
}

// TestOutboxMergeKeepsPlace: a coalesced message takes its first member's
// place in its sink's order, its members leave the pending list, and
// expiry names each sink once.
func TestOutboxMergeKeepsPlace(t *testing.T) {
	ctx := context.Background()
	db := storagetest.NewDB(t)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	row := func(id, sink string) storage.OutboxRow {
		return storage.OutboxRow{ID: id, Sink: sink, Event: "fired", Kind: "job-failed", Severity: "warning", Subjects: "[]",
			Title: id, Body: id, At: now, CreatedAt: now, NextAttemptAt: now}
	}
	err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		for _, id := range []string{"m1", "m2", "m3", "m4"} {
			if err := storage.InsertOutbox(ctx, tx, row(id, "email")); err != nil {
				return err
			}
		}
		if err := storage.InsertOutbox(ctx, tx, row("w1", "webhook")); err != nil {
			return err
		}
		return storage.MergeOutbox(ctx, tx, row("merged", "email"), []string{"m2", "m3"})
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := storage.PendingOutbox(ctx, db.Read, "email", 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if fmt.Sprint(ids) != "[m1 merged m4]" {
		t.Fatalf("pending in order %v, want [m1 merged m4]", ids)
	}
	var sinks []string
	err = db.Writer.Do(ctx, func(tx storage.Tx) error {
		sinks, err = storage.ExpireOutbox(ctx, tx, now, now.Add(24*time.Hour))
		return err
	})
	if err != nil || fmt.Sprint(sinks) != "[email webhook]" {
		t.Fatalf("expired sinks %v %v, want [email webhook]", sinks, err)
	}
	failing, err := storage.OutboxFailingSinks(ctx, db.Read)
	if err != nil || fmt.Sprint(failing) != "[email webhook]" {
		t.Fatalf("failing sinks %v %v", failing, err)
	}
}
