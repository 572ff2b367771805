package reaper

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the reaper's Prometheus series (docs/operations.md,
// "Reaper").
type Metrics struct {
	// Destroyed counts deployments reaped (droplet destroyed or already
	// gone, deployment ended) by reason, idle or session-expired
	// (chalupa_reaper_droplets_destroyed_total).
	Destroyed *prometheus.CounterVec
	// DestroyFailures counts failed provider calls for a due deployment,
	// other than rate limits (chalupa_reaper_destroy_failures_total).
	DestroyFailures prometheus.Counter
	// RateLimited counts calls refused for the write token's rate limit:
	// a 429, or held back by the client before sending
	// (chalupa_reaper_provider_rate_limited_total).
	RateLimited prometheus.Counter
	// Warnings counts reaper-warning events recorded
	// (chalupa_reaper_warnings_total).
	Warnings prometheus.Counter
	// TokensInvalidated counts customer provider tokens marked invalid
	// after DigitalOcean refused them (401/403) on a droplet call
	// (chalupa_reaper_customer_tokens_invalidated_total;
	// docs/operations.md, "Customer organizations").
	TokensInvalidated prometheus.Counter
	// Ticks counts ticks by result: ok, error or rate-limited
	// (chalupa_reaper_ticks_total).
	Ticks *prometheus.CounterVec
	// NextWakeup is when the reaper wakes on its own, in unix seconds; 0
	// while no deployment is active and it has no timer
	// (chalupa_reaper_next_wakeup_timestamp_seconds).
	NextWakeup prometheus.Gauge
	// ClockSuspect is 1 while the clock guard holds the whole fleet, else
	// 0 (chalupa_reaper_clock_suspect; docs/operations.md, "Reaper").
	ClockSuspect prometheus.Gauge
	// Held counts due deployments held instead of destroyed, by hold:
	// clock-suspect, grace, contact, storage
	// (chalupa_reaper_held_total).
	Held *prometheus.CounterVec
	// Paced counts ticks stopped by CHALUPA_REAPER_MAX_DESTROY
	// (chalupa_reaper_paced_total).
	Paced prometheus.Counter
	// Troubles counts the reaper's own trouble events recorded, by kind:
	// reaper-token-refused, reaper-rate-limited, reaper-overdue; at most
	// one of each an hour (chalupa_reaper_trouble_events_total;
	// docs/operations.md, "Reaper").
	Troubles *prometheus.CounterVec
}

// NewMetrics creates the reaper's series and registers them with reg.
// Errors: reg's (one reaper per registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Destroyed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chalupa_reaper_droplets_destroyed_total",
			Help: "Deployments reaped (droplet destroyed or already gone, deployment ended) by reason.",
		}, []string{"reason"}),
		DestroyFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_reaper_destroy_failures_total",
			Help: "Failed DigitalOcean calls for due deployments (retried after a back-off), rate limits excepted.",
		}),
		RateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_reaper_provider_rate_limited_total",
			Help: "Reaper calls refused for the write token's rate limit (429 or held back).",
		}),
		Warnings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_reaper_warnings_total",
			Help: "reaper-warning events recorded (the tag guard refused a droplet, or a customer token was refused).",
		}),
		TokensInvalidated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_reaper_customer_tokens_invalidated_total",
			Help: "Customer provider tokens marked invalid after DigitalOcean refused them (401/403) on a droplet call.",
		}),
		Ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chalupa_reaper_ticks_total",
			Help: "Reaper ticks by result (ok, error, rate-limited).",
		}, []string{"result"}),
		NextWakeup: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chalupa_reaper_next_wakeup_timestamp_seconds",
			Help: "When the reaper wakes on its own (unix seconds); 0 while it waits without a timer.",
		}),
		ClockSuspect: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chalupa_reaper_clock_suspect",
			Help: "1 while the clock guard holds the whole fleet (the server clock disagrees with it), else 0.",
		}),
		Held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chalupa_reaper_held_total",
			Help: "Due deployments held instead of destroyed, by hold (clock-suspect, grace, contact, storage).",
		}, []string{"hold"}),
		Paced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chalupa_reaper_paced_total",
			Help: "Ticks stopped by the destroy pace (CHALUPA_REAPER_MAX_DESTROY per minute).",
		}),
		Troubles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chalupa_reaper_trouble_events_total",
			Help: "The reaper's own trouble events recorded (at most one of each kind an hour), by kind: reaper-token-refused, reaper-rate-limited, reaper-overdue.",
		}, []string{"kind"}),
	}
	for _, c := range []prometheus.Collector{m.Destroyed, m.DestroyFailures, m.RateLimited, m.Warnings, m.TokensInvalidated, m.Ticks, m.NextWakeup,
		m.ClockSuspect, m.Held, m.Paced, m.Troubles} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register reaper metrics: %w", err)
		}
	}
	for _, r := range []string{ReasonIdle, ReasonSessionExpired} {
		m.Destroyed.WithLabelValues(r)
	}
	for _, h := range []string{HoldClock, HoldGrace, HoldContact, HoldStorage, HoldEnvironmentAhead} {
		m.Held.WithLabelValues(h)
	}
	for _, k := range TroubleKinds {
		m.Troubles.WithLabelValues(k)
	}
	for _, r := range []string{"ok", "error", "rate-limited"} {
		m.Ticks.WithLabelValues(r)
	}
	return m, nil
}
