package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// journalSubject is where node answers searches of its message journal.
// Each node keeps its journal in memory (docs/OPERATIONS.md, "Message
// journal"); the node a reader asks asks every live node here and merges
// their answers.
func journalSubject(node string) string { return "bub.node." + node + ".journal" }

// Journal asks node to search its message journal with req, as the
// bus encodes it, and returns what its Journal handler answered. ctx
// bounds the wait. Errors: ErrNodeGone when no node serves the subject,
// ErrDeliveryTimeout when ctx ended first, ErrJournalFailed with the
// handler's error text, ErrClosed after Close.
//
// The request goes over this node's own NATS connection, and the
// answering node takes requests only from its subscription on its own:
// a search carries the reader's rights decided by the asking node, so
// it must come from a node of the cluster (docs/CLUSTER.md, "Journal
// searches").
func (n *Node) Journal(ctx context.Context, node string, req []byte) ([]byte, error) {
	return n.ask(ctx, node, &nats.Msg{Subject: journalSubject(node), Data: req}, ErrJournalFailed, nil, func() string { return "journal of node " + node })
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
			respond(m, nil, ErrClosed)
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
	if n.handler.Journal == nil {
		respond(m, nil, errors.New("this node keeps no journal it can search (no Journal handler)"))
		return
	}
	result, err := n.handler.Journal(n.ctx, m.Data)
	respond(m, result, err)
}
