package ingest

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestRoutesTable: every row of Routes is a complete POST route under
// /api/ingest/ with its own path, struct wire types and a body bound; the
// rate quotas a row names are exactly those of the limiter its handler
// spends (so the table cannot name another route's buckets), and every
// quota of QuotaNames guards at least one route.
func TestRoutesTable(t *testing.T) {
	s := NewService(Config{Quotas: DefaultQuotas()})
	limiters := map[string]*rateLimiter{
		HeartbeatRoute:   s.heartbeats,
		TelemetryRoute:   s.telemetryRate,
		LifecycleRoute:   s.lifecycleRate,
		RunsRoute:        s.runRate,
		LogSessionsRoute: s.logRate,
		LogPlanRoute:     s.logRate,
		LogCommitRoute:   s.logRate,
		LogFinishRoute:   s.logRate,
	}
	rateQuota := map[string]bool{}
	for _, lim := range limiters {
		for _, d := range lim.dims {
			rateQuota[d.depQuota], rateQuota[d.envQuota] = true, true
		}
	}
	guarded := map[string]bool{}
	paths := map[string]bool{}
	for _, rt := range Routes {
		t.Run(rt.Path, func(t *testing.T) {
			if rt.Method != http.MethodPost || !strings.HasPrefix(rt.Path, "/api/ingest/") {
				t.Errorf("route %s %s; want POST under /api/ingest/", rt.Method, rt.Path)
			}
			if paths[rt.Path] {
				t.Errorf("path %s listed twice", rt.Path)
			}
			paths[rt.Path] = true
			if rt.Handler == nil || rt.Summary == "" || rt.MaxBody <= 0 {
				t.Errorf("incomplete row: handler %v, summary %q, max body %d", rt.Handler != nil, rt.Summary, rt.MaxBody)
			}
			for _, typ := range []reflect.Type{rt.Request, rt.Answer} {
				if typ == nil || typ.Kind() != reflect.Struct {
					t.Errorf("wire type %v; want a struct", typ)
				}
			}
			lim, ok := limiters[rt.Path]
			if !ok {
				t.Fatalf("no rate limiter known for %s: name the one its handler spends", rt.Path)
			}
			var want, got []string
			for _, d := range lim.dims {
				want = append(want, d.depQuota, d.envQuota)
			}
			for _, q := range rt.Quotas {
				if !slices.Contains(QuotaNames, q) {
					t.Errorf("quota %q is not in QuotaNames", q)
				}
				if rateQuota[q] {
					got = append(got, q)
				}
				guarded[q] = true
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("rate quotas %v; the route's limiter spends %v", got, want)
			}
		})
	}
	for _, q := range QuotaNames {
		if !guarded[q] {
			t.Errorf("quota %s guards no route of the table", q)
		}
	}
}
