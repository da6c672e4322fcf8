package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// The gateway publishes, for operators, each channel's account after a
// charge, each validation failure with its code and each anomaly counted
// by kind, on system:bcp.*, from its own clientId; and none of them
// carries a character the Reader wrote: not the words of a refused
// answer, not the invisible character of an accepted one.
func TestOperatorEvents(t *testing.T) {
	f := newFixture(t)
	f.gateway(nil)
	ops := f.dial("ops", protocol.TopicBCPEvents+".*")
	main := f.agent("main")
	researcher := f.reader("researcher")

	id := main.query(cat2Query("researcher", 2))
	researcher.expect(TypeQuery)
	researcher.refused(TopicResponse, answer(id, map[string]any{"sender": "Zanzibar Quixotic Marmalade"}), "too_many_words")
	researcher.expect(TypeValidationResult)
	researcher.send(TopicResponse, answer(id, map[string]any{"sender": "Jane\u200b SMITH"}))
	researcher.expect(TypeValidationResult)
	main.expect(TypeResponseDelivery)

	var charge *protocol.BCPChannelBudget
	var failure, anomaly *protocol.BCPValidationEvent
	deadline := time.After(bustest.Timeout)
	for charge == nil || failure == nil || anomaly == nil {
		select {
		case d := <-ops.inbox:
			if d.From != "bcp-gateway" {
				t.Fatalf("%s from %q, want from the gateway", d.Topic, d.From)
			}
			for _, raw := range []string{"zanzibar", "quixotic", "marmalade", "jane", "smith", "\u200b", `\u200b`, "u+200b"} {
				if strings.Contains(strings.ToLower(string(d.Payload)), raw) {
					t.Fatalf("%s carries the Reader's %q: %s", d.Topic, raw, d.Payload)
				}
			}
			switch d.Type() {
			case protocol.TypeBCPChannelBudget:
				var b protocol.BCPChannelBudget
				if err := json.Unmarshal(d.Payload, &b); err != nil || d.Topic != protocol.TopicBCPBudget {
					t.Fatalf("%s on %s: %v", d.Payload, d.Topic, err)
				}
				if b.Event == "charge" {
					charge = &b
				}
			case protocol.TypeBCPValidationFailed, protocol.TypeBCPAnomaly:
				var v protocol.BCPValidationEvent
				if err := json.Unmarshal(d.Payload, &v); err != nil || d.Topic != protocol.TopicBCPValidation {
					t.Fatalf("%s on %s: %v", d.Payload, d.Topic, err)
				}
				if v.Type == protocol.TypeBCPValidationFailed {
					failure = &v
				} else {
					anomaly = &v
				}
			default:
				t.Fatalf("unexpected %s on %s: %s", d.Type(), d.Topic, d.Payload)
			}
		case <-deadline:
			t.Fatalf("events seen: charge %+v, failure %+v, anomaly %+v", charge, failure, anomaly)
		}
	}
	if charge.Controller != "main" || charge.Reader != "researcher" || charge.BudgetBits != 200 || charge.Cat2Queries != 1 ||
		charge.MaxCat2Queries != 2 || charge.SpentBits <= 0 || charge.RemainingBits != charge.BudgetBits-charge.SpentBits {
		t.Errorf("charge %+v: want main/researcher, 200 bits, one of two Category-2 queries, spent + left = budget", charge)
	}
	if failure.QueryID != id || failure.Code != "too_many_words" || failure.Category != 2 || failure.AttemptsLeft == nil || *failure.AttemptsLeft != 2 {
		t.Errorf("failure %+v: want too_many_words on %s, two attempts left", failure, id)
	}
	if anomaly.QueryID != id || len(anomaly.Anomalies) != 1 || anomaly.Anomalies["invisible"] != 1 {
		t.Errorf("anomaly %+v: want one invisible on %s", anomaly, id)
	}
}
