package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRates(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []float64
		wantErr string
	}{
		{"500", []float64{500}, ""},
		{"500,1000,2000", []float64{500, 1000, 2000}, ""},
		{" 500 , 1500.5 ", []float64{500, 1500.5}, ""},
		{defaultSweep, []float64{100, 250, 500, 1000, 2000, 3000, 4000, 6000, 8000, 10000, 12000}, ""},
		{"", nil, "not a rate"},
		{"500,", nil, "not a rate"},
		{"0", nil, "not a rate"},
		{"-5", nil, "not a rate"},
		{"200000", nil, "not a rate"},
		{"1000,500", nil, "must increase"},
		{"1000,1000", nil, "must increase"},
		{"abc", nil, "not a rate"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseRates(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestParsePhases(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"max,steady", []string{"max", "steady"}, false},
		{"sweep", []string{"sweep"}, false},
		{"sweep,max", []string{"max", "sweep"}, false},
		{"max,steady,sweep,sweep", []string{"max", "steady", "sweep"}, false},
		{"max,steady,", []string{"max", "steady"}, false},
		{"", nil, true},
		{"burst", nil, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parsePhases(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// step is a sweep step that served rate with the given p99 and send lag.
func step(rate, p99, lag float64) phaseResult {
	return phaseResult{Target: "chalupa", Phase: "sweep", TargetRate: rate, ReqPerSec: rate, P99Ms: p99, SendLagP99Ms: lag}
}

func TestStepVerdict(t *testing.T) {
	bound := 10 * time.Millisecond
	for _, tc := range []struct {
		name   string
		r      phaseResult
		ok     bool
		reason string
	}{
		{"well within", step(1000, 2.5, 0.3), true, ""},
		{"exactly the bound", step(1000, 10, 0.3), true, ""},
		{"p99 over", step(1000, 10.01, 0.3), false, "p99 10.01 ms > 10.00 ms"},
		{"p99 over, client late", step(8000, 30, 12), false, "client send lag p99 12.00 ms"},
		{"errors", func() phaseResult { r := step(1000, 2, 0); r.TransportErrors = 1; return r }(), false, "1 transport errors"},
		{"non-2xx", func() phaseResult { r := step(1000, 2, 0); r.Non2xx = 3; return r }(), false, "3 non-2xx"},
		{"fell behind", func() phaseResult { r := step(4000, 2, 0); r.ReqPerSec = 3700; return r }(), false, "answered 3700/s of 4000/s"},
		{"just enough answered", func() phaseResult { r := step(4000, 2, 0); r.ReqPerSec = 3800; return r }(), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := stepVerdict(tc.r, bound)
			if ok != tc.ok || !strings.Contains(reason, tc.reason) || (tc.ok && reason != "") {
				t.Errorf("got %v %q, want %v and a reason with %q", ok, reason, tc.ok, tc.reason)
			}
		})
	}
}

func TestSummarizeSweep(t *testing.T) {
	bound := 10 * time.Millisecond
	for _, tc := range []struct {
		name      string
		steps     []phaseResult
		complete  bool
		maxRate   float64
		stoppedAt float64
		done      bool
	}{
		{"stops at the third", []phaseResult{step(500, 1, 0), step(1000, 3, 0), step(2000, 25, 0)}, true, 1000, 2000, true},
		{"first fails", []phaseResult{step(500, 11, 0)}, true, 0, 500, true},
		{"all pass", []phaseResult{step(500, 1, 0), step(1000, 2, 0)}, true, 1000, 0, true},
		{"interrupted", []phaseResult{step(500, 1, 0)}, false, 500, 0, false},
		{"interrupted after a failure is still a verdict", []phaseResult{step(500, 1, 0), step(1000, 50, 0)}, false, 500, 1000, true},
		{"nothing ran", nil, false, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := summarizeSweep("chalupa", tc.steps, bound, tc.complete)
			if s.MaxRate != tc.maxRate || s.StoppedAt != tc.stoppedAt || s.Complete != tc.done || s.P99BoundMs != 10 {
				t.Errorf("got %+v; want max %v, stopped at %v, complete %v", s, tc.maxRate, tc.stoppedAt, tc.done)
			}
			if (s.StoppedAt > 0) != (s.StopReason != "") {
				t.Errorf("stop reason %q with stoppedAt %v", s.StopReason, s.StoppedAt)
			}
		})
	}
}

// TestReportJSONHasTheNewFields checks -json carries the placement, the
// sweep settings and outcome, and the per-phase CPU figures.
func TestReportJSONHasTheNewFields(t *testing.T) {
	cfg := config{Duration: 15 * time.Second, Step: 10 * time.Second, StepWarmup: 2 * time.Second, P99Bound: 10 * time.Millisecond,
		ServerCPUs: "0", ClientCPUs: "1", Phases: []string{"sweep"}, SweepRates: []float64{500, 1000}}
	r := step(500, 1, 0)
	r.ServerCPUPerReq, r.ServerCPUsSeen, r.ClientCPUsSeen = 640, "0", "1"
	rep := report{Config: cfg, Results: []phaseResult{r}, Sweeps: []sweepSummary{summarizeSweep("chalupa", []phaseResult{r}, cfg.P99Bound, true)}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"serverCpus":"0"`, `"clientCpus":"1"`, `"phases":["sweep"]`, `"sweepRates":[500,1000]`,
		`"step":"10s"`, `"stepWarmup":"2s"`, `"p99Bound":"10ms"`, `"serverCpuUsPerRequest":640`, `"serverCpusSeen":"0"`,
		`"clientCpusSeen":"1"`, `"sweeps":[{"target":"chalupa","p99BoundMs":10,"maxRate":500,"complete":true}]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
}

func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"both", []string{"chalupa", "reference"}},
		{"chalupa", []string{"chalupa"}},
		{"floor,chalupa", []string{"floor", "chalupa"}},
		{"chalupa,reference,floor", []string{"chalupa", "reference", "floor"}},
		{"chalupa,chalupa", nil},
		{"nginx", nil},
		{"", nil},
		{"chalupa,", nil},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c := config{Only: tc.in}
			if got := c.targets(); !slices.Equal(got, tc.want) {
				t.Errorf("targets(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
