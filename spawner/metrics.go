package spawner

import "github.com/prometheus/client_golang/prometheus"

// metrics are the spawner's Prometheus metrics, in a registry of its own
// (Spawner.Registry).
type metrics struct {
	registry     *prometheus.Registry
	hibernations *prometheus.CounterVec
	wakes        *prometheus.CounterVec
	wakeSeconds  prometheus.Histogram
}

func newMetrics(s *Spawner) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		hibernations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_spawner_hibernations_total", Help: "Agents hibernated, by reason (idle, capacity).",
		}, []string{"reason"}),
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_spawner_wakes_total", Help: "Hibernated agents started again, by reason (message, retry, tool event).",
		}, []string{"reason"}),
		wakeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bub_spawner_wake_seconds", Help: "Time from the wake of a hibernated agent to its subscription to its topic.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
	}
	for _, reason := range []string{ReasonIdle, ReasonCapacity} {
		m.hibernations.WithLabelValues(reason)
	}
	for _, reason := range []string{ReasonMessage, ReasonRetry, ReasonToolEvent} {
		m.wakes.WithLabelValues(reason)
	}
	m.registry.MustRegister(m.hibernations, m.wakes, m.wakeSeconds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bub_spawner_agents_running", Help: "Agent processes running, starting or stopping.",
		}, func() float64 { return float64(s.Stats().Running) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bub_spawner_conversations_waiting", Help: "Conversations waiting for a place: queued, their messages held by the bus, or being woken.",
		}, func() float64 { return float64(s.Stats().Waiting) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bub_spawner_agents_hibernated", Help: "Topics whose agent is hibernated: stopped, with its id and workspace kept for the next message.",
		}, func() float64 { return float64(s.Stats().Hibernated) }),
	)
	return m
}

// Registry returns the registry of the spawner's metrics, to serve on
// /metrics.
func (s *Spawner) Registry() *prometheus.Registry { return s.metrics.registry }

// Stats is a count of the spawner's agents.
type Stats struct {
	// Running counts agent processes: starting, running or stopping.
	Running int
	// Hibernated counts topics whose agent is hibernated.
	Hibernated int
	// Waiting counts conversations waiting for a place: in the queue, or
	// woken by Wake.
	Waiting int
}

// Stats returns the counts of the spawner's agents now.
func (s *Spawner) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Running: len(s.agents), Waiting: s.waiting + len(s.queue)}
	for _, sl := range s.slots {
		if sl.asleep && sl.agent == nil {
			st.Hibernated++
		}
	}
	return st
}
