// Package alerts holds what an alert is on its way to a person
// (docs/operations.md, "Alerts"): a message with a stable id, and the sink
// interface every delivery channel (email, webhook) implements. It is a
// leaf: it imports no chalupa package, so the sinks under alerts/sink and
// the evaluator and outbox that raise and deliver messages share it without
// importing each other.
package alerts

import (
	"context"
	"errors"
	"time"
)

// Severity is how bad a condition is (docs/operations.md, "Alerts").
type Severity string

// Severities, worst first.
const (
	// Critical: the fleet or its data is at risk now (the clock, the
	// replica, storage, disk, the reaper's token or schedule). Repeats
	// hourly while it holds.
	Critical Severity = "critical"
	// Warning: something needs a look today (mass due, rate limits,
	// failed upgrades or jobs, an offline worker, quotas, budget).
	// Repeats daily while it holds.
	Warning Severity = "warning"
	// Info: a message that reports no condition (a test message, the
	// daily digest).
	Info Severity = "info"
)

// Event is what a message says happened to its alert.
type Event string

// Events.
const (
	// Fired: the condition started.
	Fired Event = "fired"
	// Repeated: the condition still holds (critical hourly, warning
	// daily) and the alert is not acknowledged.
	Repeated Event = "repeated"
	// Resolved: the condition ended; one message per alert.
	Resolved Event = "resolved"
	// Test: `chalupa admin alerts test`; reports no condition.
	Test Event = "test"
	// Digest: the daily digest (CHALUPA_ALERT_DIGEST).
	Digest Event = "digest"
)

// Subject is what a condition is about: the platform (ID empty, or the
// part of it the condition names, such as a token's variable for
// do-token-refused), an environment (its slug), a box (its name) or a
// deployment (its id).
type Subject struct {
	// Kind is "platform", "environment", "box" or "deployment".
	Kind string `json:"kind"`
	// ID names the subject within its kind; empty for the platform but
	// where a platform condition holds per part (do-token-refused: the
	// token's variable, never its value).
	ID string `json:"id,omitempty"`
}

// String is "platform" or "<kind> <id>", the way messages name a subject.
func (s Subject) String() string {
	if s.ID == "" {
		return s.Kind
	}
	return s.Kind + " " + s.ID
}

// Message is one message to one sink. Its ID is stable: every retry, and
// every re-send after a crash or a restore, carries the same ID, so a
// receiver drops duplicates by it (the webhook's `webhook-id`, the email's
// Message-ID; docs/operations.md, "Alerts", delivery).
type Message struct {
	// ID is the message's stable id (a ULID: it sorts by creation).
	ID string
	// AlertID is the alert the message is about; empty for a test
	// message or the digest.
	AlertID string
	// Event is what happened: fired, repeated, resolved, test, digest.
	Event Event
	// Kind is the condition's kind (e.g. "clock-suspect"); empty for a
	// test message or the digest.
	Kind string
	// Severity is the condition's severity (Info for a test or digest).
	Severity Severity
	// Subjects are what the message is about: one for a single alert, up
	// to MaxSubjects for a storm of conditions coalesced into one message.
	Subjects []Subject
	// More counts the subjects of a coalesced message left out of
	// Subjects (docs/operations.md, "Alerts", storms).
	More int
	// Title is one line saying what, where and how bad, e.g.
	// "[critical] clock-suspect on platform"; the email's subject.
	Title string
	// Text is the plain-text body: what happened, what it means and the
	// first thing to do. It never holds a secret, a URL with a token, or
	// SQL.
	Text string
	// At is when the condition changed (or the message was made, for a
	// test or digest), on the daemon's clock.
	At time.Time
}

// MaxSubjects is how many subjects a coalesced message names; the rest are
// counted in More (docs/operations.md, "Alerts", storms).
const MaxSubjects = 20

// Sink is one delivery channel: an SMTP server and its recipients, or one
// webhook URL.
type Sink interface {
	// Name is the sink's name in logs, metrics and `admin alerts`
	// ("email", "webhook"): never its URL, which can carry a token.
	Name() string
	// Send delivers m once, bounded by ctx. A nil error means the
	// receiver accepted it. An error wrapping ErrPermanent means
	// retrying the same message cannot succeed (e.g. the receiver
	// answered 400 to its body); any other error is retried. Errors
	// never carry the sink's URL, password or secret.
	Send(ctx context.Context, m Message) error
}

// ErrPermanent marks a send error that a retry of the same message cannot
// fix (docs/operations.md, "Alerts", delivery).
var ErrPermanent = errors.New("the receiver refused the message")

// HTTPStatus is the HTTP status a receiver answered, when err (a Send
// error) carries one: a sink's error reports it with a method
// HTTPStatus() int. Only the number is kept, nothing else from the
// receiver (docs/operations.md, "Alerts", delivery).
func HTTPStatus(err error) (int, bool) {
	var s interface{ HTTPStatus() int }
	if errors.As(err, &s) {
		return s.HTTPStatus(), true
	}
	return 0, false
}

// Setter is what a detector reports its condition to (docs/operations.md,
// "Alerts"): holds true when the condition starts or still holds, false
// when it ends. Setting a condition to what it already is does nothing.
// alerts/alerter's Alerter implements it; a detector depends on this
// interface only, so it need not import the worker.
type Setter interface {
	// Set reports kind's condition on subject; detail is words for the
	// message (never a secret). Errors: an unknown kind, or a write that
	// failed (for a condition not held in memory).
	Set(ctx context.Context, kind string, subject Subject, holds bool, detail string) error
}
