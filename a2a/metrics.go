package a2a

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the A2A door's Prometheus collectors.
type metrics struct {
	requests *prometheus.CounterVec
	tasks    *prometheus.CounterVec
	replays  *prometheus.CounterVec
	streams  *prometheus.GaugeVec
	answers  *prometheus.CounterVec
}

// knownMethods bounds the method label: a request for any other name is
// counted as "other", so that clients cannot grow the label set.
var knownMethods = map[string]bool{
	methodSendMessage: true, methodSendStreamingMessage: true, methodGetTask: true,
	methodListTasks: true, methodCancelTask: true, methodSubscribeToTask: true,
	methodGetExtendedAgentCard: true,
}

// newMetrics makes the collectors and registers them with reg, when
// reg is not nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_a2a_requests_total", Help: "A2A JSON-RPC requests, by agent, method and JSON-RPC code (0: success; streams count when they start).",
		}, []string{"agent", "method", "code"}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_a2a_tasks_created_total", Help: "A2A tasks created, each one message published on the agent's topic, by agent.",
		}, []string{"agent"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_a2a_idempotent_replays_total", Help: "A2A sends that an idempotency key or messageId recognised as a retry, which published nothing, by agent.",
		}, []string{"agent"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bub_a2a_streams", Help: "A2A SSE streams open now, by agent.",
		}, []string{"agent"}),
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_a2a_answers_total", Help: "Agents' answers on outbound:a2a-*, by outcome (applied, ignored: the task was finished, rejected: no such task or a bad answer).",
		}, []string{"outcome"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.tasks, m.replays, m.streams, m.answers} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// request counts one request's outcome; err nil is success.
func (m *metrics) request(agent, method string, err *Error) {
	if !knownMethods[method] {
		method = "other"
	}
	code := 0
	if err != nil {
		code = err.Code
	}
	m.requests.WithLabelValues(agent, method, strconv.Itoa(code)).Inc()
}
