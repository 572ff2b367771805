package ingest

import (
	"context"
	"net/http"
	"reflect"
	"slices"

	"github.com/chalupa-run/chalupa/protocol"
)

// Route is one signed ingest route: what the daemon mounts behind its
// protocol-v1 group (authentication with MaxBody, then Handler) and what
// the OpenAPI document describes. Ingest declares each route once, in
// Routes.
type Route struct {
	// Method is the HTTP method: POST for every signed route.
	Method string
	// Path is the route's path (an exact path, no parameters).
	Path string
	// Summary is the one-line description of the OpenAPI document.
	Summary string
	// Handler answers a request Authenticate verified; a method
	// expression on Service, so the table holds no service.
	Handler func(s *Service, ctx context.Context, v Verified) Response
	// MaxBody bounds the request body, in bytes: Authenticate refuses a
	// longer one 413 before the signature is checked.
	MaxBody int64
	// Request is the body's wire type, decoded strictly.
	Request reflect.Type
	// Answer is the type of the 202 body.
	Answer reflect.Type
	// Quotas name every quota that can refuse the route (QuotaNames):
	// the route's rate quotas, checked inside the handler before the
	// writer unit, then its caps and the storage budget, checked in the
	// unit (docs/operations.md, "Quotas"). The four log routes share one
	// set of rate buckets.
	Quotas []string
}

// Paths of the signed routes besides HeartbeatRoute.
const (
	TelemetryRoute   = "/api/ingest/telemetry"
	LifecycleRoute   = "/api/ingest/lifecycle"
	RunsRoute        = "/api/ingest/runs"
	LogSessionsRoute = "/api/ingest/logs/sessions"
	LogPlanRoute     = "/api/ingest/logs/plan"
	LogCommitRoute   = "/api/ingest/logs/commit"
	LogFinishRoute   = "/api/ingest/logs/finish"
)

// Rate quota classes of the routes, by the limiter that guards them.
var (
	heartbeatQuotas = []string{QuotaDeploymentHeartbeats, QuotaEnvironmentHeartbeats, QuotaActiveDeployments}
	telemetryQuotas = []string{QuotaDeploymentTelemetry, QuotaEnvironmentTelemetry, QuotaEnvironmentStorage, QuotaOpenSessions, QuotaTelemetryReceipts}
	lifecycleQuotas = []string{QuotaDeploymentLifecycle, QuotaEnvironmentLifecycle, QuotaEnvironmentStorage}
	runQuotas       = []string{QuotaDeploymentRuns, QuotaEnvironmentRuns, QuotaDeploymentArtifactBytes, QuotaEnvironmentArtifactBytes, QuotaEnvironmentStorage}
	logQuotas       = []string{QuotaDeploymentLogRequests, QuotaEnvironmentLogRequests}
)

// Routes are the signed ingest routes (docs/operations.md, "Signed
// ingest", "Telemetry", "Lifecycle events and runs", "Logs"), in the order
// the daemon registers them.
var Routes = []Route{
	{http.MethodPost, HeartbeatRoute, "an agent's heartbeat (HeartbeatV1): records the deployment and moves its deadlines",
		(*Service).Heartbeat, MaxHeartbeatBody, typeOf[protocol.HeartbeatV1](), typeOf[protocol.HeartbeatAccepted](), heartbeatQuotas},
	{http.MethodPost, TelemetryRoute, "one minute window of one Monitor session (WindowV1)",
		(*Service).Telemetry, MaxTelemetryBody, typeOf[protocol.WindowV1](), typeOf[TelemetryAccepted](), telemetryQuotas},
	{http.MethodPost, LifecycleRoute, "a lifecycle event of a deployment (LifecycleEventV1), stored once by its id",
		(*Service).Lifecycle, MaxLifecycleBody, typeOf[protocol.LifecycleEventV1](), typeOf[LifecycleAccepted](), lifecycleQuotas},
	{http.MethodPost, RunsRoute, "a CI suite run with its artifacts (RunReportV1)",
		(*Service).Runs, MaxRunBody, typeOf[protocol.RunReportV1](), typeOf[RunAccepted](), runQuotas},
	{http.MethodPost, LogSessionsRoute, "open a log session for one service of a deployment (OpenV1); 503 logs_not_configured without CHALUPA_LOGS_URL",
		(*Service).LogSessions, MaxLogBody, typeOf[protocol.OpenV1](), typeOf[protocol.LogSessionOpened](), slices.Concat(logQuotas, []string{QuotaLogSessions})},
	{http.MethodPost, LogPlanRoute, "reserve a log chunk's seq and persist its plan; answers a presigned PUT (ChunkV1)",
		(*Service).LogPlan, MaxLogBody, typeOf[protocol.ChunkV1](), typeOf[protocol.LogChunkPlanned](), slices.Concat(logQuotas, []string{QuotaLogChunks, QuotaLogBytes})},
	{http.MethodPost, LogCommitRoute, "verify an uploaded log chunk with the store and record it (ChunkV1)",
		(*Service).LogCommit, MaxLogBody, typeOf[protocol.ChunkV1](), typeOf[protocol.LogChunkCommitted](), logQuotas},
	{http.MethodPost, LogFinishRoute, "finish a log session with its one exact final payload (FinishV1)",
		(*Service).LogFinish, MaxLogBody, typeOf[protocol.FinishV1](), typeOf[protocol.LogSessionFinished](), logQuotas},
}

// typeOf is reflect.TypeFor, short enough for the table's rows.
func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }
