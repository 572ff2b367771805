package storage

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Run is one CI suite run as stored (docs/operations.md, "Lifecycle
// events and runs").
type Run struct {
	EnvironmentID int64
	// RunID is the producer's run id, unique within the environment.
	RunID        string
	DeploymentID string
	Suite        string
	// Status is passed, failed, cancelled or errored.
	Status     string
	CommitSHA  string
	StartedAt  time.Time
	FinishedAt time.Time
	// Fingerprint is the SHA-256 of the normalized run and its artifacts.
	Fingerprint [32]byte
	ReceivedAt  time.Time
	Artifacts   []Artifact
}

// Artifact is one ArtifactRefV1 of a run; exactly one of LocatorURL
// (LocatorKind "https") and LocatorID ("local") is set.
type Artifact struct {
	Name        string
	MediaType   string
	SizeBytes   int64
	SHA256      string
	LocatorKind string
	LocatorURL  string
	LocatorID   string
}

// RunRecorded is what RecordRun did.
type RunRecorded struct {
	// Deduplicated is true when the run was already stored with the same
	// fingerprint: nothing was written.
	Deduplicated bool
}

// RecordRun stores r and its artifacts unless the environment already
// holds r.RunID: with the same fingerprint that is a retry (Deduplicated,
// nothing written), with another ErrConflict. A new run must name a
// deployment of the environment (ErrNotFound: none; an ended one is
// accepted, a spooled report may arrive after the reaper ended it) that
// holds fewer than maxRuns runs (> 0; ErrRunQuota at the cap; 0 is
// unlimited). Every refusal writes nothing.
func RecordRun(ctx context.Context, q Querier, r Run, maxRuns int) (RunRecorded, error) {
	var fp []byte
	err := q.QueryRowContext(ctx, `SELECT fingerprint FROM runs WHERE environment_id = ? AND run_id = ?`,
		r.EnvironmentID, r.RunID).Scan(&fp)
	switch {
	case err == nil:
		if bytes.Equal(fp, r.Fingerprint[:]) {
			return RunRecorded{Deduplicated: true}, nil
		}
		return RunRecorded{}, ErrConflict
	case !errors.Is(err, sql.ErrNoRows):
		return RunRecorded{}, fmt.Errorf("read run: %w", err)
	}
	var runs int
	if err := q.QueryRowContext(ctx, `SELECT runs FROM deployments WHERE environment_id = ? AND id = ?`,
		r.EnvironmentID, r.DeploymentID).Scan(&runs); err != nil {
		return RunRecorded{}, notFound(err)
	}
	if maxRuns > 0 && runs >= maxRuns {
		return RunRecorded{}, ErrRunQuota
	}
	if _, err := q.ExecContext(ctx,
		`INSERT INTO runs (environment_id, run_id, deployment_id, suite, status, commit_sha, started_at, finished_at, fingerprint, received_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.EnvironmentID, r.RunID, r.DeploymentID, r.Suite, r.Status, r.CommitSHA, ms(r.StartedAt), ms(r.FinishedAt),
		r.Fingerprint[:], ms(r.ReceivedAt)); err != nil {
		return RunRecorded{}, fmt.Errorf("insert run: %w", err)
	}
	for i, a := range r.Artifacts {
		if _, err := q.ExecContext(ctx,
			`INSERT INTO run_artifacts (environment_id, run_id, ordinal, name, media_type, size_bytes, sha256, locator_kind, locator_url, locator_id)
			 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.EnvironmentID, r.RunID, i, a.Name, a.MediaType, a.SizeBytes, a.SHA256, a.LocatorKind,
			nullString(a.LocatorURL), nullString(a.LocatorID)); err != nil {
			return RunRecorded{}, fmt.Errorf("insert run artifact: %w", err)
		}
	}
	if _, err := q.ExecContext(ctx, `UPDATE deployments SET runs = runs + 1 WHERE environment_id = ? AND id = ?`,
		r.EnvironmentID, r.DeploymentID); err != nil {
		return RunRecorded{}, fmt.Errorf("count run: %w", err)
	}
	return RunRecorded{}, addEnvironmentStorage(ctx, q, r.EnvironmentID, RunCharge(r))
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ListRuns returns the environment's runs, most recently started first
// (ties by run id), at most limit (> 0), each with its artifacts in the
// order reported.
func ListRuns(ctx context.Context, q Querier, environmentID int64, limit int) ([]Run, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT run_id, deployment_id, suite, status, commit_sha, started_at, finished_at, fingerprint, received_at
		 FROM runs WHERE environment_id = ? ORDER BY started_at DESC, run_id DESC LIMIT ?`, environmentID, limit)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out := []Run{}
	idx := map[string]int{}
	for rows.Next() {
		r := Run{EnvironmentID: environmentID, Artifacts: []Artifact{}}
		var started, finished, received int64
		var fp []byte
		if err := rows.Scan(&r.RunID, &r.DeploymentID, &r.Suite, &r.Status, &r.CommitSHA, &started, &finished, &fp, &received); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list runs: %w", err)
		}
		r.StartedAt, r.FinishedAt, r.ReceivedAt = time.UnixMilli(started).UTC(), time.UnixMilli(finished).UTC(), time.UnixMilli(received).UTC()
		copy(r.Fingerprint[:], fp)
		idx[r.RunID] = len(out)
		out = append(out, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	if len(out) == 0 {
		return out, nil
	}
	// One query for the artifacts of the runs listed (bounded by limit).
	arows, err := q.QueryContext(ctx,
		`SELECT a.run_id, a.name, a.media_type, a.size_bytes, a.sha256, a.locator_kind, coalesce(a.locator_url, ''), coalesce(a.locator_id, '')
		 FROM run_artifacts a JOIN (SELECT run_id FROM runs WHERE environment_id = ?1 ORDER BY started_at DESC, run_id DESC LIMIT ?2) r
		   ON r.run_id = a.run_id
		 WHERE a.environment_id = ?1 ORDER BY a.run_id, a.ordinal`, environmentID, limit)
	if err != nil {
		return nil, fmt.Errorf("list run artifacts: %w", err)
	}
	defer arows.Close()
	for arows.Next() {
		var id string
		var a Artifact
		if err := arows.Scan(&id, &a.Name, &a.MediaType, &a.SizeBytes, &a.SHA256, &a.LocatorKind, &a.LocatorURL, &a.LocatorID); err != nil {
			return nil, fmt.Errorf("list run artifacts: %w", err)
		}
		if i, ok := idx[id]; ok {
			out[i].Artifacts = append(out[i].Artifacts, a)
		}
	}
	return out, arows.Err()
}

// CountRuns returns how many runs and artifacts the environment holds.
func CountRuns(ctx context.Context, q Querier, environmentID int64) (runs, artifacts int, err error) {
	if err := q.QueryRowContext(ctx,
		`SELECT (SELECT count(*) FROM runs WHERE environment_id = ?1), (SELECT count(*) FROM run_artifacts WHERE environment_id = ?1)`,
		environmentID).Scan(&runs, &artifacts); err != nil {
		return 0, 0, fmt.Errorf("count runs: %w", err)
	}
	return runs, artifacts, nil
}
