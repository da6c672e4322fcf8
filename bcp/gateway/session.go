package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// busEvent decodes a bus event, or refuses it when its from is not the
// bus: on a bus that let anyone publish system: topics, a forged
// "connected" must not reset a budget.
func (g *Gateway) busEvent(t *txn, d *peer.Delivery) (*protocol.ClientEvent, *ack, error) {
	if server := d.Conn.ServerID(); server == "" || d.From != server {
		a, err := refuse(t, AuditRecord{Event: "refusal", From: d.From}, CodeMalformed, "a "+d.Topic+" event not from the bus")
		return nil, &a, err
	}
	var ev protocol.ClientEvent
	if err := json.Unmarshal(d.Payload, &ev); err != nil || ev.ClientID == "" {
		a, err := refuse(t, AuditRecord{Event: "refusal", From: d.From}, CodeMalformed, "a "+d.Topic+" event without client_id")
		return nil, &a, err
	}
	return &ev, nil, nil
}

// onClientConnected resets a Controller's budgets when it initializes: a
// new connection is a new session. Charges the gateway recorded at or
// after the event's time are kept, since the event can arrive after the
// new session's first query.
func (g *Gateway) onClientConnected(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	return g.handle(d, func(t *txn) (ack, error) {
		ev, refusal, err := g.busEvent(t, d)
		if ev == nil {
			return *refusal, err
		}
		def := g.registry.Definition(ev.ClientID)
		if def == nil || !hasRole(def, bcp.Controller) {
			return accepted("not a controller"), nil
		}
		since, perr := time.Parse(time.RFC3339Nano, ev.Timestamp)
		if perr != nil {
			since = t.now
		}
		return g.sessionStart(t, ev.ClientID, since)
	})
}

// onClientSubscribed sends a Reader its active subscriptions each time it
// subscribes to its agent: topic.
func (g *Gateway) onClientSubscribed(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	return g.handle(d, func(t *txn) (ack, error) {
		ev, refusal, err := g.busEvent(t, d)
		if ev == nil {
			return *refusal, err
		}
		def := g.registry.Definition(ev.ClientID)
		if def == nil || !hasRole(def, bcp.Reader) || ev.Pattern != peer.AgentTopic(ev.ClientID) {
			return accepted("not a reader's agent topic"), nil
		}
		n, err := g.sendSubscriptions(t, ev.ClientID)
		if err != nil {
			return ack{}, err
		}
		return accepted("sent %d subscriptions to %s", n, ev.ClientID), nil
	})
}

// sendSubscriptions queues bcp_subscriptions_active for reader.
func (g *Gateway) sendSubscriptions(t *txn, reader string) (int, error) {
	subs := g.registry.ForReader(reader)
	if subs == nil {
		subs = []bcp.ActiveSubscription{}
	}
	if err := t.send(peer.AgentTopic(reader), SubscriptionsActive{Type: TypeSubscriptionsActive, Subscriptions: subs}); err != nil {
		return 0, err
	}
	return len(subs), t.audit(AuditRecord{Event: "subscriptions_active", Reader: reader, Outcome: "ok"})
}

// announceSubscriptions sends every Reader its subscriptions, after the
// gateway reconnected to the bus.
func (g *Gateway) announceSubscriptions(now time.Time) {
	err := g.state.update(now, func(t *txn) error {
		for _, def := range g.opts.Definitions {
			if hasRole(def, bcp.Reader) {
				if _, err := g.sendSubscriptions(t, def.Name); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		g.log.Error("bcp gateway: announce subscriptions after reconnect", "err", err)
	}
	g.wake()
}
