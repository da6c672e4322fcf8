package bus

import (
	"context"
	"log/slog"
	"sync"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/protocol"
)

// subscriber holds subscriptions in the router: one of this node's
// connections (*conn), or a stand-in for a connection on another node of
// the cluster (*standIn, cluster.go). The router, the walk, the
// publisher's lanes, the event queues and the retries treat both alike;
// where a delivery goes, what closing means and which limits apply are
// the type's to decide.
type subscriber interface {
	// held returns what every subscriber holds.
	held() *holding
	// deliver makes one attempt of d, measured already (pipeline.deliver).
	deliver(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error)
	// close stops the subscriber's deliveries, its connection closing
	// with code and reason.
	close(code websocket.StatusCode, reason string)
	// pendingCapLocked is the cap on the stored work counting against
	// the subscriber's identity; the caller holds held().mu.
	pendingCapLocked(l *Limits) int
}

var (
	_ subscriber = (*conn)(nil)
	_ subscriber = (*standIn)(nil)
)

// holding is what a subscriber holds, local or a stand-in.
type holding struct {
	server *Server
	log    *slog.Logger

	// mu guards the fields below, and a conn's own; it is the conn.mu
	// of the lock order (bus/doc.go).
	mu sync.Mutex
	// closed is set when the subscriber stops taking subscriptions: its
	// connection is closing, another connection took its clientId over,
	// or (a stand-in) it holds none any more.
	closed bool
	// clientID does not change once the subscriber is in the router, so
	// the walk reads it without mu.
	clientID string
	// identity is the credential's name, "" on an open bus; whom the
	// subscriber's stored work counts against is limitKeyLocked.
	identity string
	subs     map[string]*subscription // by pattern string
}

func (h *holding) held() *holding { return h }

// isClosed reports whether the subscriber takes no more deliveries.
func (h *holding) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// id returns the clientId, or "" before initialize.
func (h *holding) id() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clientID
}

// patternFor returns the pattern to deliver topic under: pattern when
// the subscriber still holds it, else its newest pattern that matches
// topic; or "" when none does.
func (h *holding) patternFor(pattern, topic string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[pattern]; ok {
		return pattern
	}
	var best *subscription
	for _, sub := range h.subs {
		if sub.pattern.Match(topic) && (best == nil || sub.seq > best.seq) {
			best = sub
		}
	}
	if best == nil {
		return ""
	}
	return best.pattern.String()
}
