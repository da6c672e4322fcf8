package bus

import (
	"sync"

	"github.com/bub-bus/bub/protocol"
)

// activity counts the messages a connection is being delivered, so that
// the bus can tell observers (the spawner, which stops idle agents) when a
// client starts and stops being busy.
type activity struct {
	// mu is held across the count's change and the event it causes, so
	// that a client's busy and idle events are emitted in the order its
	// count changed. It is the first lock a delivery takes (bus/doc.go).
	mu       sync.Mutex
	inFlight int
}

// track is the delivery layer of the bus's activity events: it reports a
// local connection's deliveries of published messages on
// system:client.busy (its first in flight) and system:client.idle (its
// last answered, or failed). Bus events are not counted: an observer is
// delivered the busy events themselves, which would report it busy in
// turn, without end.
func (e *events) track() layer {
	return layer{enter: e.busy, leave: e.idle}
}

// busy is track's enter half: one more delivery in flight to c.
func (e *events) busy(c *conn, d *delivery) error {
	if d.Message.From != e.server.opts.ServerID {
		e.countDelivery(c, d.ClientID, 1)
	}
	return nil
}

// idle is track's leave half: one delivery fewer in flight to c.
func (e *events) idle(c *conn, d *delivery, _ error) {
	if d.Message.From != e.server.opts.ServerID {
		e.countDelivery(c, d.ClientID, -1)
	}
}

// countDelivery adds delta to c's deliveries in flight and emits the event
// of an edge.
func (e *events) countDelivery(c *conn, clientID string, delta int) {
	c.activity.mu.Lock()
	defer c.activity.mu.Unlock()
	before := c.activity.inFlight
	c.activity.inFlight += delta
	var topic, name string
	var listened *anyCache
	switch {
	case before == 0 && c.activity.inFlight > 0:
		topic, name, listened = protocol.TopicClientBusy, protocol.EventBusy, &e.busyListened
	case before > 0 && c.activity.inFlight == 0:
		topic, name, listened = protocol.TopicClientIdle, protocol.EventIdle, &e.idleListened
	default:
		return
	}
	if !e.server.router.matchesAny(topic, listened) {
		// Nobody listens: spare every delivery an event's encoding.
		return
	}
	c.mu.Lock()
	identity := c.identity
	c.mu.Unlock()
	e.clientEvent(topic, name, clientID, identity, "", false, "")
}
