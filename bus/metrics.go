package bus

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/protocol"
)

// metrics are the bus's Prometheus collectors, in a registry of the
// Server's own so that several Servers can run in one process.
type metrics struct {
	registry         *prometheus.Registry
	connections      prometheus.Gauge
	parked           prometheus.Gauge
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
	eventsDropped    *prometheus.CounterVec
	authRefusals     *prometheus.CounterVec
	panics           *prometheus.CounterVec
}

// Every label value comes from a closed set the bus defines, never from
// what a peer sends: a label per peer-chosen string would let any client,
// even before initialize, grow the registry without bound. Method names
// go through methodLabel; outcomes, reasons and close reasons are the
// bus's own constants; error codes are the bus's own.

// The values of each outcome, reason and place label, exported as 0
// from the start: a dashboard's rate() sees a series before its first
// event, and /metrics lists every value the docs' metric tables name
// (bus/docs_test.go checks them against each other).
var (
	publishOutcomes    = []string{"routed", "held", protocol.ReasonNoSubscribers}
	deliveryOutcomes   = []string{"processed", "not_processed", protocol.ReasonRejected, failTimeout, failDisconnected, failError, failBadResult, failNotSent, failSlowSubscriber, failHeld}
	retryOutcomes      = []string{"processed", "retry", protocol.ReasonRejected, protocol.ReasonSubscriberGone}
	deadLetterReasons  = []string{protocol.ReasonMaxRetries, protocol.ReasonSubscriberGone, protocol.ReasonNoSubscribers, protocol.ReasonRejected}
	authRefusalReasons = []string{refuseHost, refuseCredential, refuseClientID, refusePublishOnly, refusePublish, refuseBusTopic, refuseSubscribe, refuseFallback, refuseDurable, refuseWaker, refuseAdmin}
	panicPlaces        = []string{panicRequest, panicAttempt, panicMetrics}
)

// unknownMethod is the label every method the bus does not serve shares.
const unknownMethod = "unknown"

// methodLabel returns method if the bus serves it, else "unknown".
func (s *Server) methodLabel(method string) string {
	if _, ok := s.methods[method]; ok {
		return method
	}
	return unknownMethod
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bub_connections", Help: "WebSocket peers connected now.",
		}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bub_connections_parked", Help: "WebSocket peers connected now whose connection is parked: idle, with no goroutine reading it.",
		}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bub_subscriptions", Help: "Subscriptions held now.",
		}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_messages_published_total", Help: "Messages accepted by sendMessage, by outcome (routed, held, no_subscribers).",
		}, []string{"outcome"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_deliveries_total", Help: "processMessage deliveries, by outcome (processed, not_processed, rejected, timeout, disconnected, error, bad_result, slow_subscriber).",
		}, []string{"outcome"}),
		deliveryDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bub_delivery_duration_seconds", Help: "Time from processMessage sent to answer or failure.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_requests_total", Help: "JSON-RPC requests answered, by method (unknown for any method the bus does not serve) and outcome (ok or the error code).",
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
	m.eventsDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_events_dropped_total", Help: "Bus events (system:message.*; system:client.* never are) one subscriber missed, by topic and reason (subscriber_queue_full: over 1,024 waited for it).",
	}, []string{"topic", "reason"})
	// Exported as 0 from the start, so that a dashboard sees the series
	// before the first drop.
	m.eventsDropped.WithLabelValues(TopicDeadLettered, dropQueueFull)
	m.panics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bub_panics_total", Help: "Panics recovered instead of crashing the bus, by where (request, retry_attempt, metrics_scrape); each is logged with its stack.",
	}, []string{"where"})
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bub_build_info", Help: "The running build; always 1.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version()},
	})
	build.Set(1)
	for vec, values := range map[*prometheus.CounterVec][]string{
		m.published: publishOutcomes, m.deliveries: deliveryOutcomes, m.retryAttempts: retryOutcomes,
		m.deadLettered: deadLetterReasons, m.authRefusals: authRefusalReasons, m.panics: panicPlaces,
	} {
		for _, v := range values {
			vec.WithLabelValues(v)
		}
	}
	m.registry.MustRegister(m.connections, m.parked, m.subscriptions, m.published, m.deliveries,
		m.deliveryDuration, m.requests, m.closes, build,
		m.retriesScheduled, m.retryAttempts, m.held, m.deadLettered, m.storeCommit, m.eventsDropped, m.authRefusals, m.panics,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watchStore exposes the store's dead-letter queue depth and pending count,
// read at scrape time.
func (m *metrics) watchStore(st Store) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bub_dead_letters", Help: "Entries in the dead-letter queue; -1 if the store cannot be read."}, func() float64 {
			return m.guardScrape(st.CountDeadLetters)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bub_pending", Help: "Retries and holds waiting in the store; -1 if the store cannot be read."}, func() float64 {
			return m.guardScrape(st.CountPending)
		}),
	)
}

// ObserveStoreCommit records one store commit's latency; pass it as the
// store's OnCommit hook.
func (s *Server) ObserveStoreCommit(d time.Duration) {
	s.metrics.storeCommit.Observe(d.Seconds())
}
