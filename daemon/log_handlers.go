package daemon

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/internal/slug"
	"github.com/chalupa-run/chalupa/storage"
)

// logHandlers list a deployment's logs, grant downloads and erase an
// environment's logs (docs/operations.md, "Logs"). broker is nil without
// CHALUPA_LOGS_URL: listing still works, downloads and erase answer 503.
type logHandlers struct {
	db     *storage.DB
	broker *logs.Broker
	clock  clockwork.Clock
}

func (h *logHandlers) register(o *operations) {
	handleOp(o, adminapi.OpListLogs, h.list)
	handleOp(o, adminapi.OpGetLogDownload, h.download)
	handleOp(o, adminapi.OpGetLogChunk, h.chunk)
	handleOp(o, adminapi.OpEraseLogs, h.erase)
	handleOp(o, adminapi.OpSetLogServices, h.setServices)
}

var errLogsOff = fail(http.StatusServiceUnavailable, "logs_not_configured", "this chalupa has no log storage (CHALUPA_LOGS_URL)")

// deployment resolves the environment and deployment of a request.
func (h *logHandlers) deployment(ctx context.Context, q storage.Querier, envSlug, dep string) (int64, storage.LogDeployment, error) {
	if !slug.Valid(envSlug) {
		return 0, storage.LogDeployment{}, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	}
	env, err := storage.EnvironmentBySlug(ctx, q, envSlug)
	if errors.Is(err, storage.ErrNotFound) {
		return 0, storage.LogDeployment{}, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	} else if err != nil {
		return 0, storage.LogDeployment{}, err
	}
	d, err := storage.LogDeploymentState(ctx, q, env.ID, dep)
	if errors.Is(err, storage.ErrNotFound) {
		return 0, d, fail(http.StatusNotFound, "deployment_not_found", "no deployment with this id in the environment")
	}
	return env.ID, d, err
}

// setServices replaces an environment's allowlist (or restores the
// default). It needs no log storage: the list is checked at session open.
func (h *logHandlers) setServices(ctx context.Context, req adminapi.SetLogServicesRequest) (adminapi.LogServices, error) {
	// The slug's pattern is its parameter's `schema` tag (checkParams).
	// Each service by the tag (docs/operations.md, "OpenAPI"); the
	// count, reset-or-services and repeats are the handler's.
	if err := checkShapeAs(req, nil, shapeAnswer{http.StatusBadRequest, "invalid_services"}); err != nil {
		return adminapi.LogServices{}, err
	}
	bad := func(msg string) error { return fail(http.StatusBadRequest, "invalid_services", msg) }
	switch {
	case req.Reset && len(req.Services) > 0:
		return adminapi.LogServices{}, bad("give either services or reset, not both")
	case !req.Reset && len(req.Services) == 0:
		return adminapi.LogServices{}, bad("give at least one service, or reset for the default list")
	case len(req.Services) > adminapi.MaxLogServices:
		return adminapi.LogServices{}, bad(fmt.Sprintf("at most %d services", adminapi.MaxLogServices))
	}
	seen := map[string]bool{}
	for _, s := range req.Services {
		if seen[s] {
			return adminapi.LogServices{}, bad("a service is named twice")
		}
		seen[s] = true
	}
	err := h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		env, err := storage.EnvironmentBySlug(ctx, tx, req.EnvironmentSlug)
		if err != nil {
			return err
		}
		return storage.SetEnvironmentLogServices(ctx, tx, env.ID, strings.Join(req.Services, ","))
	})
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.LogServices{}, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	} else if err != nil {
		return adminapi.LogServices{}, err
	}
	out := adminapi.LogServices{EnvironmentSlug: req.EnvironmentSlug, Services: req.Services, Default: req.Reset}
	if req.Reset {
		out.Services = append([]string(nil), logs.DefaultServices...)
	}
	return out, nil
}

func (h *logHandlers) list(ctx context.Context, req adminapi.ListLogsRequest) (adminapi.LogListing, error) {
	out := adminapi.LogListing{EnvironmentSlug: req.EnvironmentSlug, DeploymentID: req.DeploymentID, Sessions: []adminapi.LogSession{}}
	tx, err := h.db.Read.BeginTx(ctx, nil)
	if err != nil {
		return out, err
	}
	defer tx.Rollback() // read-only
	env, dep, err := h.deployment(ctx, tx, req.EnvironmentSlug, req.DeploymentID)
	if err != nil {
		return out, err
	}
	limits := logs.NewBroker(nil, logs.Location{}, logs.Limits{}).Limits()
	if h.broker != nil {
		limits = h.broker.Limits()
	}
	out.ChunksPlanned, out.BytesPlanned, out.MaxChunks, out.MaxBytes = dep.Chunks, dep.Bytes, limits.DeploymentChunks, limits.DeploymentBytes
	sessions, err := storage.LogSessionsOf(ctx, tx, env, req.DeploymentID, req.Service, req.Session)
	if err != nil {
		return out, err
	}
	for _, s := range sessions {
		as := adminapi.LogSession{SessionID: s.SessionID, Service: s.Service, OpenedAt: s.OpenedAt, ExpiresAt: s.ExpiresAt,
			Final: string(s.FinalPayload), Chunks: []adminapi.LogChunk{}}
		if !s.FinishedAt.IsZero() {
			as.FinishedAt = &s.FinishedAt
		}
		chunks, err := storage.LogChunksOf(ctx, tx, s.Row)
		if err != nil {
			return out, err
		}
		for _, c := range chunks {
			ac := adminapi.LogChunk{Seq: c.Seq, State: c.State, SizeBytes: c.Size, SHA256: hex.EncodeToString(c.SHA256), PlannedAt: c.PlannedAt}
			if !c.CommittedAt.IsZero() {
				t := c.CommittedAt
				ac.CommittedAt = &t
			}
			as.Chunks = append(as.Chunks, ac)
		}
		out.Sessions = append(out.Sessions, as)
	}
	return out, nil
}

// chunk answers one chunk's metadata from the database: no store request,
// no grant, so it works without log storage too.
func (h *logHandlers) chunk(ctx context.Context, req adminapi.LogChunkRequest) (adminapi.LogChunkInfo, error) {
	tx, err := h.db.Read.BeginTx(ctx, nil)
	if err != nil {
		return adminapi.LogChunkInfo{}, err
	}
	defer tx.Rollback() // read-only
	env, _, err := h.deployment(ctx, tx, req.EnvironmentSlug, req.DeploymentID)
	if err != nil {
		return adminapi.LogChunkInfo{}, err
	}
	notFound := fail(http.StatusNotFound, "log_chunk_not_found", "no chunk with this session and seq")
	s, err := storage.LogSessionByID(ctx, tx, env, req.DeploymentID, req.Session)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.LogChunkInfo{}, notFound
	} else if err != nil {
		return adminapi.LogChunkInfo{}, err
	}
	seq, err := strconv.ParseInt(req.Seq, 10, 64)
	if err != nil || seq < 0 {
		return adminapi.LogChunkInfo{}, notFound
	}
	c, err := storage.LogChunkBySeq(ctx, tx, s.Row, seq)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.LogChunkInfo{}, notFound
	} else if err != nil {
		return adminapi.LogChunkInfo{}, err
	}
	out := adminapi.LogChunkInfo{EnvironmentSlug: req.EnvironmentSlug, DeploymentID: req.DeploymentID, SessionID: s.SessionID, Service: s.Service,
		SessionFinished: !s.FinishedAt.IsZero(),
		LogChunk:        adminapi.LogChunk{Seq: c.Seq, State: c.State, SizeBytes: c.Size, SHA256: hex.EncodeToString(c.SHA256), PlannedAt: c.PlannedAt}}
	if !c.CommittedAt.IsZero() {
		t := c.CommittedAt
		out.CommittedAt = &t
	}
	return out, nil
}

func (h *logHandlers) download(ctx context.Context, req adminapi.LogDownloadRequest) (adminapi.LogDownload, error) {
	if h.broker == nil {
		return adminapi.LogDownload{}, errLogsOff
	}
	tx, err := h.db.Read.BeginTx(ctx, nil)
	if err != nil {
		return adminapi.LogDownload{}, err
	}
	defer tx.Rollback() // read-only
	env, _, err := h.deployment(ctx, tx, req.EnvironmentSlug, req.DeploymentID)
	if err != nil {
		return adminapi.LogDownload{}, err
	}
	notFound := fail(http.StatusNotFound, "log_chunk_not_found", "no committed chunk with this session and seq")
	s, err := storage.LogSessionByID(ctx, tx, env, req.DeploymentID, req.Session)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.LogDownload{}, notFound
	} else if err != nil {
		return adminapi.LogDownload{}, err
	}
	seq, err := strconv.ParseInt(req.Seq, 10, 64)
	if err != nil || seq < 0 {
		return adminapi.LogDownload{}, notFound
	}
	c, err := storage.LogChunkBySeq(ctx, tx, s.Row, seq)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && c.State != storage.LogChunkCommitted) {
		return adminapi.LogDownload{}, notFound
	} else if err != nil {
		return adminapi.LogDownload{}, err
	}
	g, err := h.broker.Store().PresignGet(ctx, c.ObjectKey, logs.DefaultGrantTTL)
	if err != nil {
		return adminapi.LogDownload{}, err
	}
	return adminapi.LogDownload{URL: g.URL, ExpiresAt: g.Expires.UTC().Truncate(time.Second), SizeBytes: c.Size, SHA256: hex.EncodeToString(c.SHA256)}, nil
}

func (h *logHandlers) erase(ctx context.Context, req adminapi.EraseLogsRequest) (adminapi.LogErasure, error) {
	if err := checkShape(req); err != nil {
		return adminapi.LogErasure{}, err
	}
	if req.Confirmation != adminapi.EraseLogsPhrase(req.EnvironmentSlug) {
		return adminapi.LogErasure{}, fail(http.StatusUnprocessableEntity, "confirmation_mismatch", `confirmation must be exactly "erase logs " followed by environmentSlug; nothing was erased`)
	}
	if h.broker == nil {
		return adminapi.LogErasure{}, errLogsOff
	}
	e := &logs.Eraser{DB: h.db, Store: h.broker.Store(), Clock: h.clock}
	r, err := e.Erase(ctx, req.EnvironmentSlug, logs.ErasePhrase(req.EnvironmentSlug))
	if errors.Is(err, logs.ErrUnknownEnvironment) {
		return adminapi.LogErasure{}, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	} else if err != nil {
		return adminapi.LogErasure{}, err
	}
	return adminapi.LogErasure{EnvironmentSlug: r.EnvironmentSlug, ErasureID: r.ErasureID, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		Resumed: r.Resumed, SessionsRemoved: r.SessionsRemoved, ChunksRemoved: r.ChunksRemoved,
		RemainingSessions: r.RemainingSessions, RemainingChunks: r.RemainingChunks}, nil
}
