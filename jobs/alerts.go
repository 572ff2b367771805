package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// The job lane is the detector of two conditions of the alert table
// (docs/operations.md, "Alerts"), reported to an alerts.Setter when they
// start and when they end, never on each look:
//
//   - job-failed, about a box: the box's last finished job failed (its run
//     failed, or its attempts ran out: "worker lost"); raised by the
//     Runner when it records the failure, ended by it when a later job of
//     the box succeeds. A box removed ends it at the next start's re-check.
//   - worker-offline, about the platform: the Watch's own warning — jobs
//     have waited queued for OfflineAfter with no worker seen for as long;
//     ends at the first look where none has (the queue emptied, or a
//     worker was seen), looked at every WatchRecheck while it holds.

// WatchRecheck is how often the Watch looks again while worker-offline
// holds, so its end is reported within a minute and not only at the next
// warning's time (OfflineRepeat). No timer runs for it otherwise.
const WatchRecheck = time.Minute

// jobHistory is how many of a box's latest jobs job-failed's re-check
// reads to find its last finished one (jobs of one box run one at a time).
const jobHistory = 20

// reported remembers what a detector last reported per subject, so it
// reports only changes; absent is "nothing reported yet".
type reported struct {
	mu   sync.Mutex
	last map[string]bool
}

// set reports kind's condition on subject through s unless it was last
// reported the same; a report that fails is returned and made again at
// the next change or look.
func (r *reported) set(ctx context.Context, s alerts.Setter, kind string, subject alerts.Subject, holds bool, detail string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]bool{}
	}
	if was, known := r.last[subject.ID]; known && was == holds {
		return nil
	}
	if err := s.Set(ctx, kind, subject, holds, detail); err != nil {
		return err
	}
	r.last[subject.ID] = holds
	return nil
}

// holding reports whether subject was last reported as holding.
func (r *reported) holding(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[id]
}

// boxSubject is the alert subject of a box: its name (unique across
// boxes).
func boxSubject(name string) alerts.Subject {
	return alerts.Subject{Kind: alerts.SubjectBox, ID: name}
}

var platform = alerts.Subject{Kind: alerts.SubjectPlatform}

// jobFailedDetail is job-failed's words for job j of box.
func jobFailedDetail(j Job, box string) string {
	return fmt.Sprintf("Job %s (%s of box %s) failed: %s", j.ID, j.Action, box, truncate(j.Error, 300))
}

// jobAlert reports job-failed on box after a job of it ended with status
// (succeeded ends it; failed raises it; anything else reports nothing),
// then calls the AfterJob hook.
func (r *Runner) jobAlert(ctx context.Context, box storage.Box, jobID, status string) {
	if r.alerts != nil && (status == storage.JobSucceeded || status == storage.JobFailed) {
		detail := ""
		if status == storage.JobFailed {
			j, err := storage.JobByID(ctx, r.db.Read, jobID)
			if err != nil {
				r.log.Error().Err(err).Str("job", jobID).Msg("reading a failed job for its alert failed")
				return
			}
			detail = jobFailedDetail(j, box.Name)
		}
		if err := r.failed.set(ctx, r.alerts, alerts.KindJobFailed, boxSubject(box.Name), status == storage.JobFailed, detail); err != nil {
			r.log.Error().Err(err).Str("box", box.Name).Msg("reporting job-failed to the alerter failed")
		}
	}
	if r.afterJob != nil {
		r.afterJob(ctx, box)
	}
}

// offlineDetail is worker-offline's words for st.
func offlineDetail(st storage.QueueState) string {
	seen := "never"
	if !st.LastWorkerSeen.IsZero() {
		seen = "last at " + st.LastWorkerSeen.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%d converge jobs are queued, the oldest since %s; a worker was seen %s.",
		st.Queued, st.OldestQueuedAt.UTC().Format(time.RFC3339), seen)
}

// offline reports whether st at now is the Watch's warning's condition:
// jobs queued OfflineAfter with no worker seen for as long.
func offline(st storage.QueueState, now time.Time) bool {
	if st.Queued == 0 {
		return false
	}
	since := st.OldestQueuedAt
	if st.LastWorkerSeen.After(since) {
		since = st.LastWorkerSeen
	}
	return !now.Before(since.Add(OfflineAfter))
}

// AlertChecks are the job lane's conditions' re-checks, by kind, for the
// alerter to run at start on every open alert of those kinds, so an alert
// whose end was lost in a crash or a restore resolves (docs/operations.md,
// "Alerts"): job-failed holds while the box exists and its last finished
// job failed; worker-offline while the Watch's condition holds. They need
// no Runner: a daemon without an executor still resolves what an earlier
// one left open.
func AlertChecks(db *storage.DB, now func() time.Time) map[string]func(ctx context.Context, subject alerts.Subject) (holds bool, detail string, err error) {
	return map[string]func(context.Context, alerts.Subject) (bool, string, error){
		alerts.KindJobFailed: func(ctx context.Context, subject alerts.Subject) (bool, string, error) {
			box, err := storage.BoxByRef(ctx, db.Read, subject.ID)
			if errors.Is(err, storage.ErrNotFound) {
				return false, "", nil
			}
			if err != nil {
				return false, "", err
			}
			js, err := storage.ListJobs(ctx, db.Read, storage.JobFilter{ScopeID: box.ID, Limit: jobHistory})
			if err != nil {
				return false, "", err
			}
			for _, j := range js {
				switch j.Status {
				case storage.JobFailed:
					return true, jobFailedDetail(j, box.Name), nil
				case storage.JobSucceeded:
					return false, "", nil
				}
			}
			return false, "", nil
		},
		alerts.KindWorkerOffline: func(ctx context.Context, _ alerts.Subject) (bool, string, error) {
			st, err := storage.ReadQueueState(ctx, db.Read)
			if err != nil {
				return false, "", err
			}
			if !offline(st, now()) {
				return false, "", nil
			}
			return true, offlineDetail(st), nil
		},
	}
}
