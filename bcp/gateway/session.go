package gateway

import (
	"context"
	"encoding/json"
	"fmt"
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
// subscribes to its agent: topic; until it acknowledges them, what else
// the gateway has for it waits (readiness.go).
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
		if err := t.unready(ev.ClientID); err != nil {
			return ack{}, err
		}
		if err := t.announce(ev.ClientID, "subscribed"); err != nil {
			return ack{}, err
		}
		return accepted("sent %d subscriptions to %s", len(g.registry.ForReader(ev.ClientID)), ev.ClientID), nil
	})
}

// onClientGone makes a Reader not ready when it disconnects or drops its
// agent: topic: what the gateway has for it from now on waits for its
// next subscription's list, instead of being held by the bus, which
// would route it ahead of that list.
func (g *Gateway) onClientGone(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	return g.handle(d, func(t *txn) (ack, error) {
		ev, refusal, err := g.busEvent(t, d)
		if ev == nil {
			return *refusal, err
		}
		if t.st.readers[peer.AgentTopic(ev.ClientID)] == nil || (d.Topic == protocol.TopicClientUnsubscribed && ev.Pattern != peer.AgentTopic(ev.ClientID)) {
			return accepted("not a reader's agent topic"), nil
		}
		if err := t.unready(ev.ClientID); err != nil {
			return ack{}, err
		}
		return accepted("%s is away; its messages wait", ev.ClientID), nil
	})
}

// readerInfos encodes each Reader's bcp_subscriptions_active, by its
// agent: topic.
func readerInfos(registry *bcp.Registry, defs []*bcp.Definition) (map[string]*readerInfo, error) {
	out := map[string]*readerInfo{}
	for _, def := range defs {
		if !hasRole(def, bcp.Reader) {
			continue
		}
		subs := registry.ForReader(def.Name)
		if subs == nil {
			subs = []bcp.ActiveSubscription{}
		}
		list, err := json.Marshal(SubscriptionsActive{Type: TypeSubscriptionsActive, Subscriptions: subs})
		if err != nil {
			return nil, fmt.Errorf("bcp gateway: encode the subscriptions of %s: %w", def.Name, err)
		}
		out[peer.AgentTopic(def.Name)] = &readerInfo{name: def.Name, list: list}
	}
	return out, nil
}

// announceSubscriptions sends Readers their subscriptions again when the
// gateway (re)connects: it cannot know who subscribed while it was away.
// all false (at start) limits it to Readers that were ready or have
// messages waiting; all true (after a reconnect) is every Reader, since
// a Reader that re-subscribed before the gateway did had its
// system:client.subscribed event published to nobody.
func (g *Gateway) announceSubscriptions(now time.Time, all bool) {
	err := g.state.update(now, func(t *txn) error {
		for _, info := range t.st.readers {
			r, err := t.reader(info.name)
			if err != nil {
				return err
			}
			if !all && !r.Ready && !t.hasParked(info.name) {
				continue
			}
			if err := t.unready(info.name); err != nil {
				return err
			}
			if err := t.announce(info.name, "gateway connected"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		g.log.Error("bcp gateway: announce subscriptions", "err", err)
	}
	g.wake()
}
