package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/bub-bus/bub/protocol"
)

// journalSubject is where node answers searches of its message journal.
// Each node keeps its journal in memory (docs/OPERATIONS.md, "Message
// journal"); the node a reader asks asks every live node here and merges
// their answers.
func journalSubject(node string) string { return "bub.node." + node + ".journal" }

// Journal asks node to search its message journal with req, as the
// bus encodes it, and returns what its Journal handler answered. ctx
// bounds the wait. Errors: ErrNodeGone when no node serves the subject,
// ErrDeliveryTimeout when ctx ended first, ErrClosed after Close.
//
// The request goes over this node's own NATS connection, and the
// answering node takes requests only from its subscription on its own:
// a search carries the reader's rights decided by the asking node, so
// it must come from a node of the cluster (docs/CLUSTER.md, "Journal
// searches").
func (n *Node) Journal(ctx context.Context, node string, req []byte) ([]byte, error) {
	if n.closed.Load() {
		return nil, ErrClosed
	}
	if !protocol.ValidNodeID(node) {
		return nil, fmt.Errorf("cluster: journal of node %q: not a node id", node)
	}
	resp, err := n.nc.RequestWithContext(ctx, journalSubject(node), req)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: journal of node %s", ErrNodeGone, node)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.Canceled):
		return nil, fmt.Errorf("%w: journal of node %s: %w", ErrDeliveryTimeout, node, err)
	case errors.Is(err, nats.ErrConnectionClosed):
		return nil, fmt.Errorf("%w: journal of node %s", ErrClosed, node)
	case err != nil:
		return nil, fmt.Errorf("cluster: journal of node %s: %w", node, err)
	}
	if len(resp.Data) == 0 {
		return nil, fmt.Errorf("%w: empty journal answer from node %s", ErrBadFrame, node)
	}
	switch resp.Data[0] {
	case responseOK:
		return resp.Data[1:], nil
	case responseError:
		return nil, fmt.Errorf("cluster: journal of node %s: %s", node, resp.Data[1:])
	}
	return nil, fmt.Errorf("%w: journal answer status %d from node %s", ErrBadFrame, resp.Data[0], node)
}

// startJournalService answers journal searches with the handler, each
// on a goroutine of its own (a search reads up to a page of the journal,
// and must not hold up the next).
func (n *Node) startJournalService() error {
	s, err := n.nc.Subscribe(journalSubject(n.id), func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		if !n.goFunc(func() { n.serveJournal(m) }) {
			_ = m.Respond(append([]byte{responseError}, ErrClosed.Error()...))
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", journalSubject(n.id), err)
	}
	n.natsSubs = append(n.natsSubs, s)
	return nil
}

// serveJournal runs the Journal handler for one search and answers it.
func (n *Node) serveJournal(m *nats.Msg) {
	var result []byte
	err := errors.New("this node keeps no journal it can search (no Journal handler)")
	if n.handler.Journal != nil {
		result, err = n.handler.Journal(n.ctx, m.Data)
	}
	if err != nil {
		_ = m.Respond(append([]byte{responseError}, err.Error()...))
		return
	}
	resp := make([]byte, 1+len(result))
	resp[0] = responseOK
	copy(resp[1:], result)
	_ = m.Respond(resp)
}
