package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// owner is a BUB_CLIENTS value: the connection holding a clientId.
type owner struct {
	Node string `json:"node"`
	Conn uint64 `json:"conn"`
	// Run is the run of Node that claimed (Node.run).
	Run string `json:"run,omitempty"`
}

// clientKey is the BUB_CLIENTS key of a clientId: base64url, because a
// clientId may hold characters a key may not, and base64url's alphabet
// is all key characters.
func clientKey(clientID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(clientID))
}

// claims are this node's clientIds, by clientId.
type claims struct {
	// mu guards byClient and every claim in it.
	mu       sync.Mutex
	byClient map[string]*claim
}

type claim struct {
	conn uint64
	// rev is the claim's revision in BUB_CLIENTS; 0 while the write is
	// under way.
	rev uint64
	// laterRev is the highest revision of another connection's claim
	// that the watcher saw while rev was still 0: if it exceeds rev, the
	// other claim won.
	laterRev uint64
}

// ClaimClient records that conn, a connection of this node, holds
// clientID, and returns the claim's revision. The connection that held
// it before, on whichever node, hears it through its node's TakenOver.
// Of two claims racing, the later revision wins; the loser's node hears
// TakenOver, or gets ErrTakenOver here if the winner was written while
// this call was under way.
func (n *Node) ClaimClient(ctx context.Context, clientID string, conn uint64) (uint64, error) {
	if n.closed.Load() {
		return 0, ErrClosed
	}
	if clientID == "" {
		return 0, errors.New("cluster: claim client: empty clientId")
	}
	if err := n.quorum(); err != nil {
		return 0, fmt.Errorf("cluster: claim clientId %q for conn %d: %w", clientID, conn, err)
	}
	value, err := json.Marshal(owner{Node: n.id, Conn: conn, Run: n.run})
	if err != nil {
		return 0, err
	}
	c := &claim{conn: conn}
	cs := &n.claims
	cs.mu.Lock()
	// A newer local connection replaces an older one here without a
	// TakenOver: the bus takes over within a node itself.
	cs.byClient[clientID] = c
	cs.mu.Unlock()

	rev, err := n.putKey(ctx, bucketClients, clientKey(clientID), value, anyRevision)

	cs.mu.Lock()
	defer cs.mu.Unlock()
	mine := cs.byClient[clientID] == c
	switch {
	case err != nil:
		if mine {
			delete(cs.byClient, clientID)
		}
		return 0, fmt.Errorf("cluster: claim clientId %q for conn %d: %w", clientID, conn, n.explain(err))
	case !mine:
		// A newer local claim replaced this one while it was written.
		return rev, fmt.Errorf("%w: clientId %q, conn %d", ErrTakenOver, clientID, conn)
	case c.laterRev > rev:
		delete(cs.byClient, clientID)
		return rev, fmt.Errorf("%w: clientId %q, conn %d", ErrTakenOver, clientID, conn)
	}
	c.rev = rev
	return rev, nil
}

// ReleaseClient removes conn's claim of clientID, when the connection
// closes. A claim another connection took already is left alone.
func (n *Node) ReleaseClient(ctx context.Context, clientID string, conn uint64) error {
	cs := &n.claims
	cs.mu.Lock()
	c := cs.byClient[clientID]
	if c == nil || c.conn != conn || c.rev == 0 {
		cs.mu.Unlock()
		return nil
	}
	delete(cs.byClient, clientID)
	cs.mu.Unlock()
	err := n.quorum()
	if err == nil {
		_, err = n.deleteKey(ctx, bucketClients, clientKey(clientID), c.rev)
	}
	if err != nil && !isWrongRevision(err) {
		return fmt.Errorf("cluster: release clientId %q of conn %d: %w", clientID, conn, n.explain(err))
	}
	return nil
}

// startClientWatch starts the goroutine that notices claims taken over.
// Only changes matter: a claim is always newer than the node's start.
func (n *Node) startClientWatch(ctx context.Context) error {
	n.claims.byClient = make(map[string]*claim)
	return n.startWatch(ctx, n.clients, bucketClients, true, func(e jetstream.KeyValueEntry, _ bool) { n.sawClaim(e) })
}

// sawClaim handles one change of BUB_CLIENTS. A put by another
// connection newer than this node's claim takes the clientId over. A
// delete this node did not make (ReleaseClient forgets the claim before
// deleting) ends the claim too, but takes nothing over: another node
// presumed this one dead and removed its claims, and its subscriptions
// with them, and the client must come back (the cluster test saw a
// subscriber told "taken over" that way, which it takes as final, and
// 520 held messages wait for it to the end).
func (n *Node) sawClaim(e jetstream.KeyValueEntry) {
	raw, err := base64.RawURLEncoding.DecodeString(e.Key())
	if err != nil {
		return
	}
	clientID := string(raw)
	if e.Operation() == jetstream.KeyValuePut {
		var o owner
		if json.Unmarshal(e.Value(), &o) != nil || o.Node == n.id {
			// This node's own writes: the current claim, or an older
			// one it already replaced.
			return
		}
	}
	cs := &n.claims
	cs.mu.Lock()
	c := cs.byClient[clientID]
	switch {
	case c == nil:
		cs.mu.Unlock()
		return
	case c.rev == 0:
		c.laterRev = max(c.laterRev, e.Revision())
		cs.mu.Unlock()
		return
	case e.Revision() <= c.rev:
		cs.mu.Unlock()
		return
	}
	delete(cs.byClient, clientID)
	cs.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		n.log.Warn("cluster: another node removed a claim of this node, having presumed it dead", "client", clientID, "conn", c.conn, "revision", e.Revision())
		if n.handler.ClaimRemoved != nil {
			n.handler.ClaimRemoved(clientID, c.conn)
		}
		return
	}
	n.log.Info("cluster: clientId taken over", "client", clientID, "conn", c.conn, "revision", e.Revision())
	if n.handler.TakenOver != nil {
		n.handler.TakenOver(clientID, c.conn)
	}
}
