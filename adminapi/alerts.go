package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Alert operation ids (docs/operations.md, "Alerts", operating alerts).
const (
	OpListAlerts      = "adminListAlerts"
	OpTestAlertSinks  = "adminTestAlertSinks"
	OpAckAlert        = "adminAckAlert"
	OpMuteAlertKind   = "adminMuteAlertKind"
	OpUnmuteAlertKind = "adminUnmuteAlertKind"
	pathAlerts        = "/api/admin/alerts"
	pathAlertTest     = "/api/admin/alerts/test"
	pathAlertAck      = "/api/admin/alerts/ack/:id"
	pathAlertMute     = "/api/admin/alerts/mute/:kind"
	pathAlertUnmute   = "/api/admin/alerts/unmute/:kind"
)

// MaxAlertMute is the longest mute adminMuteAlertKind accepts
// (alerter.MaxMute; docs/operations.md, "Alerts"): the CLI refuses a
// longer --for before calling.
const MaxAlertMute = 24 * time.Hour

var alertOperations = []Operation{
	{ID: OpListAlerts, MCP: mcpRead, Method: methodGet, Path: pathAlerts, Status: http.StatusOK,
		Request: typeOf[ListAlertsRequest](), Response: typeOf[AlertList](),
		Summary: "open and recently resolved alerts, each sink's delivery state and the mutes in force"},
	{ID: OpTestAlertSinks, MCP: mcpMutate, Method: methodPost, Path: pathAlertTest, Status: http.StatusOK, Mutates: true,
		Request: typeOf[TestAlertSinksRequest](), Response: typeOf[AlertTest](),
		Summary: "send a test message now to every sink (or one) and answer what each said: delivered, or the kind of failure"},
	// Acknowledging stops the repeats of one alert a person was already
	// told of; the alert stays listed and its end is still sent.
	{ID: OpAckAlert, MCP: mcpMutate, Method: methodPost, Path: pathAlertAck, Status: http.StatusOK, Mutates: true,
		Request: typeOf[AckAlertRequest](), Response: typeOf[Alert](),
		Summary: "acknowledge an open alert: no repeats until it resolves"},
	// A mute silences a whole kind, the first message of new alerts
	// included: an agent must say so in words.
	{ID: OpMuteAlertKind, MCP: mcpDestructive("mute {kind} for {for}"), Method: methodPost, Path: pathAlertMute, Status: http.StatusOK, Mutates: true,
		Request: typeOf[MuteAlertKindRequest](), Response: typeOf[AlertMute](),
		Summary: "mute a kind of alert for at most 24h: its alerts open and resolve without messages (recorded as an event)"},
	{ID: OpUnmuteAlertKind, MCP: mcpMutate, Method: methodPost, Path: pathAlertUnmute, Status: http.StatusOK, Mutates: true,
		Request: typeOf[UnmuteAlertKindRequest](), Response: typeOf[AlertUnmuted](),
		Summary: "end a kind's mute early (recorded as an event)"},
}

// ListAlertsRequest holds adminListAlerts' parameters.
type ListAlertsRequest struct {
	// Recent is how many resolved alerts to list, latest first (default
	// 20, at most 200).
	Recent int64 `query:"recent" json:"-" schema:"minimum=1,maximum=200" refuse:"400 bad_recent"`
}

// AlertSubject is what an alert is about: platform (ID empty),
// environment (its slug), box (its name) or deployment (its id).
type AlertSubject struct {
	Kind string `json:"kind"`
	ID   string `json:"id,omitempty"`
}

// Alert is one alert (docs/operations.md, "Alerts"): a condition of a kind
// on a subject, from when it started until it ended.
type Alert struct {
	// ID is the alert's id (a ULID), the argument of adminAckAlert.
	ID string `json:"id"`
	// Kind is the condition's kind, e.g. reaper-overdue (the Conditions
	// table of docs/operations.md, "Alerts").
	Kind string `json:"kind"`
	// Severity is critical or warning.
	Severity string       `json:"severity"`
	Subject  AlertSubject `json:"subject"`
	// Detail is the condition's words when it started; never a secret.
	Detail string `json:"detail,omitempty"`
	// OpenedAt is when it started; ResolvedAt when it ended (absent while
	// open).
	OpenedAt   time.Time `json:"openedAt"`
	ResolvedAt time.Time `json:"resolvedAt,omitzero"`
	// LastSentAt is when its last fired or repeated message was queued.
	LastSentAt time.Time `json:"lastSentAt"`
	// AckedAt is when it was acknowledged (no repeats since); absent if
	// not.
	AckedAt time.Time `json:"ackedAt,omitzero"`
	// Muted is true while its kind is muted.
	Muted bool `json:"muted,omitempty"`
}

// AlertSinkState is one sink's delivery state. Messages held in memory
// while storage refuses writes are not counted.
type AlertSinkState struct {
	// Name is the sink's name (email, webhook), never its URL.
	Name string `json:"name"`
	// LastDeliveredAt is when it last accepted a message; absent if never.
	LastDeliveredAt time.Time `json:"lastDeliveredAt,omitzero"`
	// Pending counts its messages waiting for delivery.
	Pending int `json:"pending"`
	// FailingSince is the first failed attempt of its current run of
	// failures; absent while it is not failing.
	FailingSince time.Time `json:"failingSince,omitzero"`
	// LastError is that run's latest failure kind: timeout, refused,
	// permanent or expired.
	LastError string `json:"lastError,omitempty"`
}

// AlertMute is a kind's mute: no fired or repeated message until Until.
type AlertMute struct {
	Kind    string    `json:"kind"`
	Until   time.Time `json:"until"`
	MutedAt time.Time `json:"mutedAt"`
}

// AlertList answers adminListAlerts.
type AlertList struct {
	// Open are the open alerts, oldest first.
	Open []Alert `json:"open"`
	// Recent are the latest resolved alerts, latest first.
	Recent []Alert `json:"recent"`
	// Sinks are the configured sinks (none: alerts are recorded, nothing
	// is sent).
	Sinks []AlertSinkState `json:"sinks"`
	// Mutes are the mutes in force.
	Mutes []AlertMute `json:"mutes"`
}

// TestAlertSinksRequest is adminTestAlertSinks' body: {} for every sink,
// or {"sink":"webhook"} for one: the sinks' names are email and webhook
// (404 unknown_sink for another, as for one not configured).
type TestAlertSinksRequest struct {
	Sink string `json:"sink,omitempty" schema:"enum=email|webhook"`
}

// AlertSinkTest is what one sink said to the test message.
type AlertSinkTest struct {
	Sink string `json:"sink"`
	// MessageID is the test message's id (the webhook-id; the email's
	// Message-ID holds it).
	MessageID string `json:"messageId"`
	// Delivered is true when the receiver accepted the message.
	Delivered bool `json:"delivered"`
	// Failure is the failure's kind otherwise: timeout, refused (worth a
	// retry: a 5xx, a refused connection) or permanent (e.g. a 4xx).
	Failure string `json:"failure,omitempty"`
	// Detail is the sink's words for the failure, e.g. "webhook: the
	// receiver answered 500"; never a URL, password or secret.
	Detail string `json:"detail,omitempty"`
}

// AlertTest answers adminTestAlertSinks, one result per sink tried.
type AlertTest struct {
	Results []AlertSinkTest `json:"results"`
}

// AckAlertRequest names the alert to acknowledge.
type AckAlertRequest struct {
	ID string `path:"id" json:"-"`
}

// MuteAlertKindRequest names the kind to mute, and for how long.
type MuteAlertKindRequest struct {
	Kind string `path:"kind" json:"-" schema:"enum=clock-step|clock-suspect|replica-failing|replica-refused|storage-unavailable|disk-low|reaper-token-refused|reaper-overdue|do-token-refused|reaper-mass-due|reaper-rate-limited|agent-upgrade-failed|job-failed|worker-offline|quota-exceeded|budget|alert-delivery-failing" refuse:"404 unknown_kind"`
	// For is a Go duration, e.g. "2h": more than 0 and at most 24h. The
	// tag declares its syntax (400 bad_duration); the bounds are the
	// handler's (400 mute_out_of_bounds).
	For string `json:"for" schema:"required,pattern=duration"`
}

// UnmuteAlertKindRequest names the kind whose mute ends.
type UnmuteAlertKindRequest struct {
	Kind string `path:"kind" json:"-" schema:"enum=clock-step|clock-suspect|replica-failing|replica-refused|storage-unavailable|disk-low|reaper-token-refused|reaper-overdue|do-token-refused|reaper-mass-due|reaper-rate-limited|agent-upgrade-failed|job-failed|worker-offline|quota-exceeded|budget|alert-delivery-failing" refuse:"404 unknown_kind"`
}

// AlertUnmuted answers adminUnmuteAlertKind: Unmuted is false when the
// kind was not muted (nothing was written).
type AlertUnmuted struct {
	Kind    string `json:"kind"`
	Unmuted bool   `json:"unmuted"`
}

// ListAlerts calls adminListAlerts; recent 0 is the default (20).
func (c *Client) ListAlerts(ctx context.Context, recent int64) (AlertList, error) {
	return call[AlertList](ctx, c, OpListAlerts, ListAlertsRequest{Recent: recent})
}

// TestAlertSinks calls adminTestAlertSinks; sink "" tries every sink.
func (c *Client) TestAlertSinks(ctx context.Context, sink string) (AlertTest, error) {
	return call[AlertTest](ctx, c, OpTestAlertSinks, TestAlertSinksRequest{Sink: sink})
}

// AckAlert calls adminAckAlert.
func (c *Client) AckAlert(ctx context.Context, id string) (Alert, error) {
	return call[Alert](ctx, c, OpAckAlert, AckAlertRequest{ID: id})
}

// MuteAlertKind calls adminMuteAlertKind; d is sent in Go syntax.
func (c *Client) MuteAlertKind(ctx context.Context, kind string, d time.Duration) (AlertMute, error) {
	return call[AlertMute](ctx, c, OpMuteAlertKind, MuteAlertKindRequest{Kind: kind, For: d.String()})
}

// UnmuteAlertKind calls adminUnmuteAlertKind.
func (c *Client) UnmuteAlertKind(ctx context.Context, kind string) (AlertUnmuted, error) {
	return call[AlertUnmuted](ctx, c, OpUnmuteAlertKind, UnmuteAlertKindRequest{Kind: kind})
}
