package main

import (
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// TestFoldCoverage: the fold phase counts as "fold in progress" only when
// back-to-back passes span the whole window and none drained before its end.
func TestFoldCoverage(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	pass := func(from, to float64, pending bool) foldPass {
		return foldPass{Sent: at(from), Answered: at(to), Report: adminapi.RetentionRun{TelemetryBacklogPending: pending}}
	}
	from, to := at(3), at(18)
	for _, tc := range []struct {
		name   string
		passes []foldPass
		want   bool
	}{
		{"one pass over the window", []foldPass{pass(0, 20, true)}, true},
		{"one pass that drained after the window", []foldPass{pass(0, 20, false)}, true},
		{"two passes back to back", []foldPass{pass(0, 10, true), pass(10.002, 30, false)}, true},
		{"drained inside the window", []foldPass{pass(0, 10, false)}, false},
		{"started after the window began", []foldPass{pass(4, 20, true)}, false},
		{"a long gap", []foldPass{pass(0, 10, true), pass(10.5, 30, true)}, false},
		{"answered before the end", []foldPass{pass(0, 10, true)}, false},
		{"a failed pass", []foldPass{{Sent: at(0), Answered: at(5), Err: "boom"}}, false},
		{"none", nil, false},
	} {
		got, _, why := coverage(tc.passes, from, to)
		if got != tc.want {
			t.Errorf("%s: covered %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}
