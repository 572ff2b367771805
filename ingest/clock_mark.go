package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// KindClockMarkOverride is the platform event recorded when environments
// whose signed times agree with the server clock override a wall-clock
// high-water mark ahead of it (docs/operations.md, "Signed ingest").
const KindClockMarkOverride = "clock-mark-override"

// ClockMark is the wall-clock high-water mark ingest keeps with the clock
// guard (docs/operations.md, "Signed ingest", the high-water mark): the
// newest signed timestamp accepted while the guard is not suspect, never
// past the server's own clock. The daemon hands the reaper's clock guard
// (clockguard.Guard) as both Config.Contact and Config.Mark; methods must
// be quick and never block.
type ClockMark interface {
	// MarkFloor reports whether signedAt is older than the mark minus
	// SkewWindow: the request is refused timestamp_skew.
	MarkFloor(signedAt time.Time) bool
	// MarkAccepted is the signed time of a request that was accepted.
	MarkAccepted(signedAt time.Time)
	// MarkAgreed is a request of environment refused only by MarkFloor,
	// validly signed within SkewWindow of the server clock; it reports
	// whether the agreement of enough environments overrode the mark
	// (the request is then judged again).
	MarkAgreed(environment string, signedAt time.Time) bool
	// MarkDue returns the mark to write (and the mark an override
	// replaced, or zero), when one is due; force writes any change at once.
	MarkDue(force bool) (mark, overridden time.Time, ok bool)
	// MarkPersisted records that the write of mark committed.
	MarkPersisted(mark time.Time)
}

// writeMark stores mark inside a writer unit, and the override event when
// overridden (the mark it replaced) is set.
func writeMark(ctx context.Context, tx storage.Tx, mark, overridden time.Time) error {
	if err := storage.SetClockMark(ctx, tx, mark); err != nil {
		return err
	}
	if overridden.IsZero() {
		return nil
	}
	_, err := storage.InsertPlatformEvent(ctx, tx, storage.LifecycleEvent{
		ID:   fmt.Sprintf("%s:%d", KindClockMarkOverride, mark.UnixMilli()),
		Kind: KindClockMarkOverride,
		Message: fmt.Sprintf("signed requests of %d or more environments agree with the server clock, %s behind the high-water mark: the mark is set back to the server clock and their requests are accepted again (docs/operations.md, \"Signed ingest\")",
			AgreeEnvironments, overridden.Sub(mark).Round(time.Second)),
		OccurredAt: mark,
	})
	return err
}

// AgreeEnvironments is the clock guard's AgreeEnvironments (a test keeps
// them equal): ingest does not import the reaper.
const AgreeEnvironments = 3

// PersistMark writes the mark now if it changed since its last write: the
// nonce pruner calls it before it reads the mark, and at shutdown, so a
// stop loses none of it. A nil mark writes nothing.
func PersistMark(ctx context.Context, db *storage.DB, mark ClockMark) error {
	if mark == nil {
		return nil
	}
	m, overridden, ok := mark.MarkDue(true)
	if !ok {
		return nil
	}
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error { return writeMark(ctx, tx, m, overridden) }); err != nil {
		return err
	}
	mark.MarkPersisted(m)
	return nil
}
