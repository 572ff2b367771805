package adminapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Telemetry operation ids (docs/operations.md, "Erasing telemetry" and
// "Performance API").
const (
	OpEraseTelemetry           = "adminEraseTelemetry"
	OpGetTelemetryAudit        = "adminGetTelemetryAudit"
	OpGetDeploymentPerformance = "adminGetDeploymentPerformance"
)

const eraseTelemetryPhrasePrefix = "erase telemetry "

var telemetryOperations = []Operation{
	{ID: OpEraseTelemetry, MCP: MCPPolicy{Access: MCPDestructive, Confirm: "erase telemetry {environmentSlug}", ConfirmBody: "confirmation"}, Method: methodPost, Path: "/api/admin/telemetry/erase", Status: http.StatusOK, Mutates: true,
		Request: typeOf[EraseTelemetryRequest](), Response: typeOf[TelemetryErasure](),
		Summary: `erase one environment's telemetry: {"environmentSlug","confirmation":"erase telemetry <slug>"}`},
	{ID: OpGetTelemetryAudit, MCP: mcpRead, Method: methodGet, Path: "/api/admin/telemetry/audit", Status: http.StatusOK,
		Response: typeOf[TelemetryAudit](),
		Summary:  "row counts of the five telemetry tables, every environment"},
	{ID: OpGetDeploymentPerformance, MCP: mcpRead, Method: methodGet, Path: "/api/admin/environments/:slug/deployments/:id/performance", Status: http.StatusOK,
		Request: typeOf[DeploymentPerformanceRequest](), Response: typeOf[DeploymentPerformance](),
		Summary: "one deployment's telemetry series, sessions and anomalies (?from=&to=&step=)"},
}

// EraseTelemetryPhrase is the confirmation adminEraseTelemetry requires
// for the environment slug, exactly: "erase telemetry <slug>".
func EraseTelemetryPhrase(slug string) string { return eraseTelemetryPhrasePrefix + slug }

// EraseTelemetryRequest is the body of adminEraseTelemetry. Confirmation
// must equal EraseTelemetryPhrase(EnvironmentSlug).
type EraseTelemetryRequest struct {
	EnvironmentSlug string `json:"environmentSlug" schema:"required,pattern=slug"`
	Confirmation    string `json:"confirmation"`
}

// TelemetryTableCounts holds one number per telemetry table: rows removed
// by an erasure, or rows held.
type TelemetryTableCounts struct {
	Sessions  int64 `json:"telemetrySessions"`
	Windows   int64 `json:"telemetryWindows"`
	Hourly    int64 `json:"telemetryHourly"`
	Receipts  int64 `json:"telemetryReceipts"`
	Anomalies int64 `json:"telemetryAnomalies"`
}

// Total is the sum over the five tables.
func (c TelemetryTableCounts) Total() int64 {
	return c.Sessions + c.Windows + c.Hourly + c.Receipts + c.Anomalies
}

// TelemetryErasure is the receipt of adminEraseTelemetry: counts only,
// never a metric value or a credential (docs/operations.md, "Erasing
// telemetry").
type TelemetryErasure struct {
	EnvironmentSlug string `json:"environmentSlug"`
	// ErasureID identifies the erasure; it is also the id of the
	// telemetry-erased lifecycle event recorded when it completed.
	ErasureID string `json:"erasureId"`
	// StartedAt is when the erasure's first call began; FinishedAt when
	// it completed.
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	// Resumed is true when this call completed an erasure an earlier,
	// interrupted call began: Removed then counts the rows both removed.
	Resumed bool `json:"resumed"`
	// Removed counts the rows removed per table, over the whole erasure.
	Removed TelemetryTableCounts `json:"removed"`
	// Remaining counts the environment's rows left when the erasure
	// completed: zero unless agents sent telemetry during the erasure.
	Remaining TelemetryTableCounts `json:"remaining"`
	// Batches counts the writer units this call used.
	Batches int64 `json:"batches"`
}

// TelemetryAudit answers adminGetTelemetryAudit: the rows each telemetry
// table holds over every environment, counted in one read snapshot.
type TelemetryAudit struct {
	Tables TelemetryTableCounts `json:"tables"`
	// Total is Tables.Total().
	Total int64 `json:"total"`
	// CheckedAt is the daemon's clock when it counted.
	CheckedAt time.Time `json:"checkedAt"`
}

// EraseTelemetry calls adminEraseTelemetry. A wrong phrase is an *APIError
// with Status 422 (confirmation_mismatch); an unknown environment 404
// (environment_not_found).
func (c *Client) EraseTelemetry(ctx context.Context, req EraseTelemetryRequest) (TelemetryErasure, error) {
	return call[TelemetryErasure](ctx, c, OpEraseTelemetry, req)
}

// GetTelemetryAudit calls adminGetTelemetryAudit.
func (c *Client) GetTelemetryAudit(ctx context.Context) (TelemetryAudit, error) {
	return call[TelemetryAudit](ctx, c, OpGetTelemetryAudit, nil)
}

// DeploymentPerformanceRequest holds adminGetDeploymentPerformance's
// parameters. From, To and Step are optional (zero: absent): the default
// range is the 24 hours before To (default now), the default step the
// smallest whole minute that keeps every series within
// MaxPerformancePoints. Step is whole minutes from 1 minute to 1 day.
type DeploymentPerformanceRequest struct {
	EnvironmentSlug string        `path:"slug" json:"-" schema:"pattern=slug" refuse:"404 environment_not_found"`
	DeploymentID    string        `path:"id" json:"-" schema:"pattern=id" refuse:"404 deployment_not_found"`
	From            time.Time     `query:"from" json:"-"`
	To              time.Time     `query:"to" json:"-"`
	Step            time.Duration `query:"step" json:"-"`
}

// MaxPerformancePoints bounds the points of one series
// (docs/operations.md, "Performance API").
const MaxPerformancePoints = 1500

// DeploymentPerformance answers adminGetDeploymentPerformance.
type DeploymentPerformance struct {
	EnvironmentSlug string `json:"environmentSlug"`
	DeploymentID    string `json:"deploymentId"`
	// From and To bound the windows served: [From, To). From is the
	// requested start aligned down to a multiple of the step (from
	// 1970-01-01T00:00:00Z), the start of the first point.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// StepSeconds is the width of a point.
	StepSeconds int64 `json:"stepSeconds"`
	// HourlyResolution is true when some points are whole hours served
	// from hourly rollups at a step finer than an hour (Note says so);
	// such points carry Seconds 3600.
	HourlyResolution bool   `json:"hourlyResolution"`
	Note             string `json:"note,omitempty"`
	// Series has one entry per metric of the fixed set, in its order.
	Series []MetricSeries `json:"series"`
	// Sessions are the deployment's sessions with a window in the range,
	// oldest first, at most MaxPerformanceSessions (the newest);
	// SessionsTruncated says some were left out.
	Sessions          []PerformanceSession `json:"sessions"`
	SessionsTruncated bool                 `json:"sessionsTruncated"`
	// Anomalies are those of the listed sessions.
	Anomalies []PerformanceAnomaly `json:"anomalies"`
}

// MaxPerformanceSessions bounds DeploymentPerformance.Sessions.
const MaxPerformanceSessions = 100

// MetricSeries is one metric's points, oldest first; a point with no
// samples is left out.
type MetricSeries struct {
	// Metric is the name in the telemetry window's "metrics" object.
	Metric string `json:"metric"`
	// Unit is what the values measure.
	Unit   string             `json:"unit"`
	Points []PerformancePoint `json:"points"`
}

// PerformancePoint aggregates every sample taken in [T, T+step) (or
// [T, T+Seconds) when Seconds is set): N samples, their Sum, Mean, Min,
// Max, and the Last one taken.
type PerformancePoint struct {
	T    time.Time `json:"t"`
	N    int64     `json:"n"`
	Sum  float64   `json:"sum"`
	Mean float64   `json:"mean"`
	Min  float64   `json:"min"`
	Max  float64   `json:"max"`
	Last float64   `json:"last"`
	// Seconds is the point's width when it differs from the step: an hour
	// served at hourly resolution.
	Seconds int64 `json:"seconds,omitempty"`
}

// PerformanceSession is one telemetry session with its terminal summary.
type PerformanceSession struct {
	ID            string    `json:"id"`
	FirstWindowAt time.Time `json:"firstWindowAt"`
	LastWindowAt  time.Time `json:"lastWindowAt"`
	Windows       int64     `json:"windows"`
	EndedAt       time.Time `json:"endedAt,omitzero"`
	EndReason     string    `json:"endReason,omitempty"`
	// Summary is the terminal summary as the finalizer stored it (JSON);
	// absent until the session is finalized.
	Summary      json.RawMessage `json:"summary,omitempty" schema:"object"`
	SummarizedAt time.Time       `json:"summarizedAt,omitzero"`
}

// PerformanceAnomaly is one anomaly rule that held in a session.
type PerformanceAnomaly struct {
	SessionID   string    `json:"sessionId"`
	Kind        string    `json:"kind"`
	FirstSeenAt time.Time `json:"firstSeenAt"`
	LastSeenAt  time.Time `json:"lastSeenAt"`
	Windows     int64     `json:"windows"`
}

// GetDeploymentPerformance calls adminGetDeploymentPerformance. Bad
// parameters are an *APIError with Status 422; an unknown environment or
// deployment 404.
func (c *Client) GetDeploymentPerformance(ctx context.Context, req DeploymentPerformanceRequest) (DeploymentPerformance, error) {
	return call[DeploymentPerformance](ctx, c, OpGetDeploymentPerformance, req)
}
