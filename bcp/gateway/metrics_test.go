package gateway

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
)

// Crossing 80% of a budget publishes one alert; the metrics count bits,
// refusals, validations and the alert.
func TestBudgetAlertAndMetrics(t *testing.T) {
	f := newFixture(t)
	g := f.gateway(nil)
	main := f.agent("main")
	researcher := f.reader("researcher")
	ops := f.dial("ops", "alert:bcp.budget")

	id := main.query(cat2Query("researcher", 1)) // 11 of 200 bits: no alert
	researcher.expect(TypeQuery)
	researcher.refused(TopicResponse, answer(id, map[string]any{"sender": "two words"}), "too_many_words")
	researcher.expect(TypeValidationResult)
	researcher.send(TopicResponse, answer(id, map[string]any{"sender": "Ada"}))
	researcher.expect(TypeValidationResult)
	ops.quiet()

	main.query(cat2Query("researcher", 15)) // 176 of 200: over 80%
	alert := ops.expect(TypeBudgetAlert)
	if alert["controller"] != "main" || alert["reader"] != "researcher" || alert["spent_bits"] != 176.0 || alert["budget_bits"] != 200.0 {
		t.Fatalf("alert = %v", alert)
	}
	main.refused(TopicQuery, cat1Query("nobody"), CodeNoChannel)

	rec := httptest.NewRecorder()
	g.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`bub_bcp_bits_spent_total{controller="main",reader="researcher"} 176`,
		`bub_bcp_budget_remaining_bits{controller="main",reader="researcher"} 24`,
		`bub_bcp_budget_alerts_total{controller="main",reader="researcher"} 1`,
		`bub_bcp_validations_total{code="too_many_words",outcome="rejected"} 1`,
		`bub_bcp_validations_total{code="",outcome="accepted"} 1`,
		`bub_bcp_refusals_total{code="no_channel"} 1`,
		`bub_bcp_approvals_pending 0`,
		`bub_bcp_query_latency_seconds_count 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}

// A message the bus refuses (here an alert topic the gateway's grant
// lacks) is dropped and audited, not retried forever ahead of the rest.
func TestRefusedMessageDoesNotBlock(t *testing.T) {
	f := newFixture(t)
	g := f.gateway(func(o *Options) { o.AlertTopic = "alert:elsewhere" })
	main := f.agent("main")
	researcher := f.reader("researcher")
	main.query(cat2Query("researcher", 15)) // crosses 80%: an alert the bus refuses
	researcher.expect(TypeQuery)
	main.query(cat1Query("researcher"))
	researcher.expect(TypeQuery)
	require.Eventually(t, func() bool {
		records, _ := g.Audit(0)
		for _, r := range records {
			if r.Event == "undeliverable" && strings.Contains(r.Outcome, "forbidden") {
				return true
			}
		}
		return false
	}, bustest.Timeout, 10*time.Millisecond, "the refused alert in the audit log")
}
