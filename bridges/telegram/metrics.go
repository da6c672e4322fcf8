package telegram

import "github.com/prometheus/client_golang/prometheus"

// metrics are the bridge's Prometheus series. Outcomes are labels, not
// separate series, so one query shows where updates go.
type metrics struct {
	registry *prometheus.Registry
	// updates counts updates by kind (message, edited_message, ...) and
	// outcome: forwarded, duplicate, not_allowed, not_mentioned,
	// unsupported.
	updates *prometheus.CounterVec
	// busRetries counts forwards the bus did not accept (down, no
	// subscriber) and that were tried again.
	busRetries prometheus.Counter
	// sends counts Bot API sendMessage outcomes: sent, rate_limited,
	// retry, refused, plain_text (re-sent without markup).
	sends *prometheus.CounterVec
	// webhookRefused counts webhook requests with a wrong or missing
	// secret token.
	webhookRefused prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_telegram_updates_total", Help: "Telegram updates received, by kind and outcome (forwarded, duplicate, not_allowed, not_mentioned, unsupported).",
		}, []string{"kind", "outcome"}),
		busRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bub_telegram_bus_retries_total", Help: "Forwards to the bus that were not accepted (bus down, no subscriber) and were tried again.",
		}),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_telegram_sends_total", Help: "Messages sent to Telegram, by outcome (sent, plain_text, rate_limited, retry, refused).",
		}, []string{"outcome"}),
		webhookRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bub_telegram_webhook_refused_total", Help: "Webhook requests refused for a wrong or missing secret token.",
		}),
	}
	m.registry.MustRegister(m.updates, m.busRetries, m.sends, m.webhookRefused)
	return m
}
