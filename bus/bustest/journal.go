package bustest

import (
	"strings"

	"github.com/bub-bus/bub/protocol"
)

// JournalKinds lists journal events as "kind" or "kind:detail", for
// comparing a message's story with what a test expects.
func JournalKinds(events []protocol.JournalEvent) []string {
	var out []string
	for _, ev := range events {
		k := ev.Kind
		switch ev.Kind {
		case protocol.JournalDelivery:
			k += ":" + ev.ClientID + ":" + ev.Outcome
		case protocol.JournalRouted, protocol.JournalWoken:
			k += ":" + strings.Join(ev.Chain, ",") + ev.Reason
		case protocol.JournalDeadLettered, protocol.JournalReplayed:
			k += ":" + ev.Reason
		}
		out = append(out, k)
	}
	return out
}
