package daemon

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// runHandlers list CI suite runs (docs/operations.md, "Lifecycle events
// and runs").
type runHandlers struct {
	db *storage.DB
}

func (h *runHandlers) register(o *operations) {
	handleOp(o, adminapi.OpListRuns, h.list)
}

func (h *runHandlers) list(ctx context.Context, req adminapi.ListRunsRequest) (adminapi.RunList, error) {
	out := adminapi.RunList{EnvironmentSlug: req.EnvironmentSlug, Runs: []adminapi.Run{}}
	notFound := fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	env, err := storage.EnvironmentBySlug(ctx, h.db.Read, req.EnvironmentSlug)
	if errors.Is(err, storage.ErrNotFound) {
		return out, notFound
	} else if err != nil {
		return out, err
	}
	runs, err := storage.ListRuns(ctx, h.db.Read, env.ID, adminapi.MaxRuns)
	if err != nil {
		return out, err
	}
	for _, r := range runs {
		run := adminapi.Run{RunID: r.RunID, Deployment: r.DeploymentID, Suite: r.Suite, Status: r.Status, Commit: r.CommitSHA,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, ReceivedAt: r.ReceivedAt,
			Fingerprint: hex.EncodeToString(r.Fingerprint[:]), Artifacts: make([]adminapi.Artifact, 0, len(r.Artifacts))}
		for _, a := range r.Artifacts {
			run.Artifacts = append(run.Artifacts, adminapi.Artifact{V: 1, Name: a.Name, MediaType: a.MediaType, SizeBytes: a.SizeBytes,
				SHA256: a.SHA256, Locator: adminapi.Locator{Kind: a.LocatorKind, URL: a.LocatorURL, ID: a.LocatorID}})
		}
		out.Runs = append(out.Runs, run)
	}
	return out, nil
}
