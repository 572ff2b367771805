package daemon

import (
	"context"
	"errors"
	"net/http"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest/telemetry"
)

// telemetryHandlers erase an environment's telemetry, audit the telemetry
// tables and read a deployment's performance (docs/operations.md, "Erasing
// telemetry" and "Performance API").
type telemetryHandlers struct {
	eraser *telemetry.Eraser
	perf   *telemetry.PerformanceReader
}

func (h *telemetryHandlers) register(o *operations) {
	handleOp(o, adminapi.OpEraseTelemetry, h.erase)
	handleOp(o, adminapi.OpGetTelemetryAudit, h.audit)
	handleOp(o, adminapi.OpGetDeploymentPerformance, h.performance)
}

func (h *telemetryHandlers) erase(ctx context.Context, req adminapi.EraseTelemetryRequest) (adminapi.TelemetryErasure, error) {
	if err := checkShape(req); err != nil {
		return adminapi.TelemetryErasure{}, err
	}
	r, err := h.eraser.Erase(ctx, req.EnvironmentSlug, req.Confirmation)
	switch {
	case errors.Is(err, telemetry.ErrConfirmationMismatch):
		return r, fail(http.StatusUnprocessableEntity, "confirmation_mismatch", `confirmation must be exactly "erase telemetry " followed by environmentSlug; nothing was erased`)
	case errors.Is(err, telemetry.ErrUnknownEnvironment):
		return r, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	}
	return r, err
}

func (h *telemetryHandlers) audit(ctx context.Context, _ none) (adminapi.TelemetryAudit, error) {
	return h.eraser.Audit(ctx)
}

func (h *telemetryHandlers) performance(ctx context.Context, req adminapi.DeploymentPerformanceRequest) (adminapi.DeploymentPerformance, error) {
	p, err := h.perf.Read(ctx, req)
	var pr *telemetry.ParamRefusal
	switch {
	case errors.As(err, &pr):
		return p, fail(http.StatusUnprocessableEntity, "bad_param", pr.Message)
	case errors.Is(err, telemetry.ErrUnknownEnvironment):
		return p, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	case errors.Is(err, telemetry.ErrUnknownDeployment):
		return p, fail(http.StatusNotFound, "deployment_not_found", "no deployment with this id in the environment")
	}
	return p, err
}
