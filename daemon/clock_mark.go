package daemon

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// openClockMark gives the clock guard the wall-clock high-water mark the
// database holds, before any request (a start more than
// clockguard.MarkTolerance behind it is a step back: the guard holds the
// fleet), and makes every lifecycle event written through the writer carry
// the guard's trusted time while it is suspect (docs/operations.md,
// "Signed ingest" and "Reaper"). Errors: reading the mark.
func openClockMark(db *storage.DB, guard *clockguard.Guard, log zerolog.Logger) error {
	mark, err := storage.ClockMark(context.Background(), db.Read)
	if err != nil {
		return err
	}
	if behind := guard.RestoreMark(mark); behind > 0 {
		log.Warn().Time("mark", mark).Dur("behind", behind).
			Msg("the wall clock is behind the high-water mark of accepted signed requests: clock suspect, the reaper destroys nothing until the fleet agrees (docs/operations.md, \"Signed ingest\")")
	}
	db.Writer.SetEventTime(guard.EventTime)
	return nil
}
