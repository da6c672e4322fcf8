package bus

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/buildinfo"
)

// metrics are the bus's Prometheus collectors, in a registry of the
// Server's own so that several Servers can run in one process.
type metrics struct {
	registry         *prometheus.Registry
	connections      prometheus.Gauge
	subscriptions    prometheus.Gauge
	published        *prometheus.CounterVec
	deliveries       *prometheus.CounterVec
	deliveryDuration prometheus.Histogram
	requests         *prometheus.CounterVec
	closes           *prometheus.CounterVec
	retriesScheduled prometheus.Counter
	retryAttempts    *prometheus.CounterVec
	held             prometheus.Gauge
	deadLettered     *prometheus.CounterVec
	storeCommit      prometheus.Histogram
	eventsDropped    prometheus.Counter
	authRefusals     *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bub_connections", Help: "WebSocket peers connected now.",
		}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bub_subscriptions", Help: "Subscriptions held now.",
		}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_messages_published_total", Help: "Messages accepted by sendMessage, by outcome (routed, no_subscribers).",
		}, []string{"outcome"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_deliveries_total", Help: "processMessage deliveries, by outcome (processed, not_processed, timeout, disconnected, error, bad_result).",
		}, []string{"outcome"}),
		deliveryDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bub_delivery_duration_seconds", Help: "Time from processMessage sent to answer or failure.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_requests_total", Help: "JSON-RPC requests answered, by method and outcome (ok or the error code).",
		}, []string{"method", "outcome"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_connection_closes_total", Help: "Connections the bus closed, by reason.",
		}, []string{"reason"}),
	}
	m.retriesScheduled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bub_retries_scheduled_total", Help: "Retries scheduled after a routing pass.",
	})
	m.retryAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_retry_attempts_total", Help: "Retry attempts made, by outcome (processed, retry, rejected, subscriber_gone).",
	}, []string{"outcome"})
	m.held = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bub_held_messages", Help: "Messages held for a subscriber to appear.",
	})
	m.deadLettered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_dead_lettered_total", Help: "Messages dead-lettered, by reason.",
	}, []string{"reason"})
	m.storeCommit = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "bub_store_commit_seconds", Help: "Store commit latency, fsync included.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 3, 10),
	})
	m.authRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_auth_refusals_total", Help: "Requests and upgrades refused by identity and access control, by reason (host, credential, client_id, publish_only, publish, bus_topic, subscribe, fallback, admin).",
	}, []string{"reason"})
	m.eventsDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bub_events_dropped_total", Help: "System events dropped because the event queue was full.",
	})
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bub_build_info", Help: "The running build; always 1.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version()},
	})
	build.Set(1)
	m.registry.MustRegister(m.connections, m.subscriptions, m.published, m.deliveries,
		m.deliveryDuration, m.requests, m.closes, build,
		m.retriesScheduled, m.retryAttempts, m.held, m.deadLettered, m.storeCommit, m.eventsDropped, m.authRefusals,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watchStore exposes the store's dead-letter queue depth and pending count,
// read at scrape time.
func (m *metrics) watchStore(st *store.Store) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bub_dead_letters", Help: "Entries in the dead-letter queue."}, func() float64 {
			n, _ := st.CountDeadLetters()
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bub_pending", Help: "Retries and holds waiting in the store."}, func() float64 {
			n, _ := st.CountPending()
			return float64(n)
		}),
	)
}

// ObserveStoreCommit records one store commit's latency; pass it as the
// store's OnCommit hook.
func (s *Server) ObserveStoreCommit(d time.Duration) {
	s.metrics.storeCommit.Observe(d.Seconds())
}
