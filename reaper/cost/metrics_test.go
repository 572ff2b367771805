package cost

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMonthToDateSeries: before the first successful pass neither the
// per-environment gauge nor the deprecated total has a series (a
// dashboard moved to the sum sees what it saw before: no data, not a 0
// from one and nothing from the other); a failed pass adds none; after a
// pass the deprecated total is the per-environment gauge's sum
// (docs/operations.md, "Metrics").
func TestMonthToDateSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	values := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				key := mf.GetName()
				for _, l := range mt.GetLabel() {
					key += "/" + l.GetValue()
				}
				out[key] = mt.GetGauge().GetValue()
			}
		}
		return out
	}
	series := func() int {
		n := 0
		for key := range values() {
			if strings.HasPrefix(key, "chalupa_cost_month_to_date_") {
				n++
			}
		}
		return n
	}
	if n := series(); n != 0 {
		t.Fatalf("%d month-to-date series before any pass; want 0", n)
	}
	m.observe(Report{}, errors.New("provider down"))
	if n := series(); n != 0 {
		t.Fatalf("%d month-to-date series after a failed pass; want 0", n)
	}
	m.observe(Report{Estimate: Estimate{ComputeUSD: 3, StorageUSD: 1.5, Environments: []EnvironmentCost{
		{Slug: "demo", ComputeUSD: 2, StorageUSD: 1.5}, {Slug: "ci", ComputeUSD: 1},
	}}}, nil)
	if n := series(); n != 3 {
		t.Fatalf("%d month-to-date series after a pass; want 2 environments and the total", n)
	}
	v := values()
	sum := v["chalupa_cost_month_to_date_usd/demo"] + v["chalupa_cost_month_to_date_usd/ci"]
	if total := v["chalupa_cost_month_to_date_total_usd"]; total != sum || total != 4.5 {
		t.Fatalf("deprecated total %v; the per-environment sum is %v", total, sum)
	}
}
