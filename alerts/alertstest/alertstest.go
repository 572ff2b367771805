// Package alertstest holds the recording alerts.Setter that detectors'
// tests report to: it stands for the alerter, whose own tests cover what a
// report writes and sends (docs/operations.md, "Alerts").
package alertstest

import (
	"context"
	"slices"
	"sync"

	"github.com/chalupa-run/chalupa/alerts"
)

// Call is one report a detector made through Set.
type Call struct {
	Kind    string
	Subject alerts.Subject
	Holds   bool
	Detail  string
}

// Recorder is an alerts.Setter that records every report, in order, and
// never fails. The zero value is ready; it is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	calls []Call
}

var _ alerts.Setter = (*Recorder)(nil)

// Set records the report and returns nil.
func (r *Recorder) Set(_ context.Context, kind string, subject alerts.Subject, holds bool, detail string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, Call{kind, subject, holds, detail})
	return nil
}

// Calls returns every report so far, in order.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Of returns the reports made for kind, in order.
func (r *Recorder) Of(kind string) []Call {
	var out []Call
	for _, c := range r.Calls() {
		if c.Kind == kind {
			out = append(out, c)
		}
	}
	return out
}

// Holds returns the holds values reported for kind, in order (never nil,
// so that it compares equal to an empty literal with slices.Equal and
// prints as []).
func (r *Recorder) Holds(kind string) []bool {
	out := []bool{}
	for _, c := range r.Of(kind) {
		out = append(out, c.Holds)
	}
	return out
}

// Raised returns the reports that raised a condition (holds true), in
// order.
func (r *Recorder) Raised() []Call {
	var out []Call
	for _, c := range r.Calls() {
		if c.Holds {
			out = append(out, c)
		}
	}
	return out
}
