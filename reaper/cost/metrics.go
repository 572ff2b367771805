package cost

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the cost worker's Prometheus series (docs/operations.md,
// "Cost reconciliation").
type Metrics struct {
	// Duration observes each pass's duration in seconds, by result.
	Duration *prometheus.HistogramVec
	// Runs counts passes by result (ok or error).
	Runs *prometheus.CounterVec
	// Adopted and Ended count droplets adopted and deployments ended.
	Adopted, Ended prometheus.Counter
	// MonthToDate is the last successful pass's month-to-date estimate
	// in USD per environment slug, chalupa_cost_month_to_date_usd; the
	// fleet's total is its sum.
	MonthToDate *prometheus.GaugeVec
	// MonthToDateTotal is that sum as chalupa_cost_month_to_date_total_usd:
	// deprecated, a gauge whose _total suffix reads as a counter, kept for
	// one release (docs/operations.md, "Metrics"). It has no labels and,
	// like its replacement, no series until the first successful pass: a
	// dashboard moved to the sum sees the same absence, not a 0 that
	// turns into "no data".
	MonthToDateTotal *prometheus.GaugeVec
}

// NewMetrics registers the series on reg. Errors: a registration failure
// (registering twice on one registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chalupa_cost_reconcile_duration_seconds",
			Help:    "Duration of cost reconciliation passes in seconds, by result.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"result"}),
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chalupa_cost_reconcile_runs_total",
			Help: "Cost reconciliation passes by result (ok, or error: the provider or database failed and nothing was written).",
		}, []string{"result"}),
		Adopted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_cost_droplets_adopted_total",
			Help: "Chalupa-tagged droplets no agent reported, adopted as deployments by inventory.",
		}),
		Ended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_cost_deployments_ended_total",
			Help: "Deployments ended by inventory because their droplet is gone (provider 404).",
		}),
		MonthToDate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "chalupa_cost_month_to_date_usd",
			Help: "Month-to-date cost estimate in USD per environment at the last successful pass (estimates: the DigitalOcean invoice is authoritative).",
		}, []string{"environment"}),
		MonthToDateTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "chalupa_cost_month_to_date_total_usd",
			Help: "Deprecated, removed in the release after next: use sum(chalupa_cost_month_to_date_usd) (or vector(0) for a 0 before the first pass). Month-to-date cost estimate in USD over every environment at the last successful pass.",
		}, nil),
	}
	for _, c := range []prometheus.Collector{m.Duration, m.Runs, m.Adopted, m.Ended, m.MonthToDate, m.MonthToDateTotal} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register cost metrics: %w", err)
		}
	}
	m.Runs.WithLabelValues("ok")
	m.Runs.WithLabelValues("error")
	return m, nil
}

// observe records one pass (nil-safe).
func (m *Metrics) observe(rep Report, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.Runs.WithLabelValues(result).Inc()
	m.Duration.WithLabelValues(result).Observe(rep.Duration.Seconds())
	if err != nil {
		return
	}
	m.Adopted.Add(float64(rep.Adopted))
	m.Ended.Add(float64(rep.Ended))
	m.MonthToDate.Reset()
	for _, e := range rep.Estimate.Environments {
		m.MonthToDate.WithLabelValues(e.Slug).Set(e.TotalUSD())
	}
	m.MonthToDateTotal.WithLabelValues().Set(rep.Estimate.TotalUSD())
}
