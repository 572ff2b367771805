package alerter

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/storage"
)

// metrics are the alerter's series (docs/operations.md, "Alerts").
type metrics struct {
	deliveredTotal *prometheus.CounterVec
	failedTotal    *prometheus.CounterVec
	pending        prometheus.Gauge
	open           *prometheus.GaugeVec
}

// newMetrics creates the series and registers them with reg (none when
// reg is nil). Every sink's counters start at 0.
func newMetrics(reg prometheus.Registerer, sinks []alerts.Sink) (*metrics, error) {
	m := &metrics{
		deliveredTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chalupa_alerts_delivered_total",
			Help: "Alert messages a sink accepted, by sink.",
		}, []string{"sink"}),
		failedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chalupa_alerts_failed_total",
			Help: "Failed sends of alert messages (each retried until it expires after 24 h), by sink.",
		}, []string{"sink"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chalupa_alerts_pending",
			Help: "Alert messages waiting for delivery, every sink (held in memory included).",
		}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "chalupa_alerts_open",
			Help: "Open alerts by severity.",
		}, []string{"severity"}),
	}
	for _, s := range sinks {
		m.deliveredTotal.WithLabelValues(s.Name())
		m.failedTotal.WithLabelValues(s.Name())
	}
	for _, sev := range []alerts.Severity{alerts.Critical, alerts.Warning} {
		m.open.WithLabelValues(string(sev))
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.deliveredTotal, m.failedTotal, m.pending, m.open} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register alert metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) delivered(sink string) { m.deliveredTotal.WithLabelValues(sink).Inc() }
func (m *metrics) failed(sink string)    { m.failedTotal.WithLabelValues(sink).Inc() }

// updateGauges sets the pending and open gauges from the database (and
// the messages held in memory).
func (a *Alerter) updateGauges(ctx context.Context) {
	n, err := storage.OutboxPendingCount(ctx, a.db.Read)
	if err != nil {
		return
	}
	a.mu.Lock()
	for _, e := range a.mem {
		for _, msg := range e.msgs {
			if msg.row.DeliveredAt.IsZero() {
				n++
			}
		}
	}
	a.mu.Unlock()
	a.metrics.pending.Set(float64(n))
	counts, err := storage.OpenAlertCounts(ctx, a.db.Read)
	if err != nil {
		return
	}
	for _, sev := range []alerts.Severity{alerts.Critical, alerts.Warning} {
		a.metrics.open.WithLabelValues(string(sev)).Set(float64(counts[string(sev)]))
	}
}
