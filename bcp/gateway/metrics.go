package gateway

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus collectors, in a registry of its
// own. Every label value comes from a closed set: channels from the
// definitions, codes from this package's and package bcp's constants,
// never a string a peer chose (a refusal for an unknown agent is counted
// without the agent).
type metrics struct {
	registry         *prometheus.Registry
	bitsSpent        *prometheus.CounterVec
	budgetRemaining  *prometheus.GaugeVec
	validations      *prometheus.CounterVec
	refusals         *prometheus.CounterVec
	budgetAlerts     *prometheus.CounterVec
	queryLatency     prometheus.Histogram
	approvalsPending prometheus.GaugeFunc
}

func newMetrics(st *state) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		bitsSpent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_bcp_bits_spent_total", Help: "Declared bits charged to a channel's budget, by queries and publishes.",
		}, []string{"controller", "reader"}),
		budgetRemaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bub_bcp_budget_remaining_bits", Help: "Bits left in a channel's budget in the current session, as of its last charge or reset.",
		}, []string{"controller", "reader"}),
		validations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_bcp_validations_total", Help: "Answers and publishes validated, by outcome (accepted, rejected) and code.",
		}, []string{"outcome", "code"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_bcp_refusals_total", Help: "Messages the gateway refused, by code.",
		}, []string{"code"}),
		budgetAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_bcp_budget_alerts_total", Help: "Times a channel's spending crossed the alert share of its budget.",
		}, []string{"controller", "reader"}),
		queryLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bub_bcp_query_latency_seconds", Help: "From a query's acceptance to its delivery to the Controller, approvals included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}),
	}
	m.approvalsPending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bub_bcp_approvals_pending", Help: "Category-3 approvals awaiting a human decision.",
	}, func() float64 {
		n, err := st.countPendingApprovals()
		if err != nil {
			return -1
		}
		return float64(n)
	})
	m.registry.MustRegister(m.bitsSpent, m.budgetRemaining, m.validations, m.refusals, m.budgetAlerts, m.queryLatency, m.approvalsPending)
	return m
}

// MetricsHandler serves the gateway's metrics in the Prometheus format.
func (g *Gateway) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(g.metrics.registry, promhttp.HandlerOpts{})
}

func (m *metrics) observeLatency(created, now time.Time) {
	if !created.IsZero() {
		m.queryLatency.Observe(now.Sub(created).Seconds())
	}
}

// TypeBudgetAlert is the alert published when a channel's spending
// crosses Options.AlertShare of its budget.
const TypeBudgetAlert = "bcp_budget_alert"

// BudgetAlert is bcp_budget_alert, published on Options.AlertTopic.
type BudgetAlert struct {
	Type       string  `json:"type"`
	Controller string  `json:"controller"`
	Reader     string  `json:"reader"`
	SpentBits  float64 `json:"spent_bits"`
	BudgetBits float64 `json:"budget_bits"`
	Share      float64 `json:"share"`
}
