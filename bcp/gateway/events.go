package gateway

import (
	"strings"
	"time"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/protocol"
)

// The gateway's events for operators (docs/BCP.md, "Events for
// operators"): each channel's account after every charge and reset, and
// each validation failure and anomaly, for the bus's console to show.
// They go under system:, which only a grant that names system: may
// publish or subscribe (docs/SECURITY.md): no agent can forge one, and
// no Controller can read one unless an operator grants it. They carry
// codes, kinds, counts and the definitions' names, never a Reader's text:
// what a Reader wrote reaches nobody but itself and the audit log
// (section 12). Their topics and wire types are protocol's
// (protocol/bcp.go), which the console decodes too.

// isEventTopic says whether topic is one of the events': nobody need
// subscribe to them (the console reads them as the bus routes them).
func isEventTopic(topic string) bool { return strings.HasPrefix(topic, protocol.TopicBCPEvents+".") }

// budgetEvent queues the channel's account after a charge or a reset.
func budgetEvent(t *txn, event, controller, reader string, ch *bcp.Channel, u bcp.Usage) error {
	return t.send(protocol.TopicBCPBudget, protocol.BCPChannelBudget{
		Type: protocol.TypeBCPChannelBudget, Event: event, Controller: controller, Reader: reader,
		SpentBits: float64(u.SpentBits), RemainingBits: float64(u.RemainingBits), BudgetBits: float64(ch.BudgetBits),
		Cat2Queries: u.Cat2Queries, MaxCat2Queries: ch.MaxCat2Queries, Cat3Queries: u.Cat3Queries, MaxCat3Queries: ch.MaxCat3Queries,
		At: t.now.UTC().Format(time.RFC3339Nano),
	})
}

// validationFailedEvent queues a validation failure: its code, never its
// detail, which quotes the Reader.
func validationFailedEvent(t *txn, ev protocol.BCPValidationEvent, code string) error {
	ev.Type, ev.Code, ev.At = protocol.TypeBCPValidationFailed, code, t.now.UTC().Format(time.RFC3339Nano)
	return t.send(protocol.TopicBCPValidation, ev)
}

// anomalyEvent queues the anomalies of a valid response, if it has any,
// counted by kind: their excerpts stay out.
func anomalyEvent(t *txn, ev protocol.BCPValidationEvent, res *bcp.Result) error {
	if len(res.Anomalies) == 0 {
		return nil
	}
	ev.Type, ev.At = protocol.TypeBCPAnomaly, t.now.UTC().Format(time.RFC3339Nano)
	ev.Anomalies = make(map[string]int)
	for _, a := range res.Anomalies {
		ev.Anomalies[string(a.Kind)]++
	}
	return t.send(protocol.TopicBCPValidation, ev)
}
