package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/bub-bus/bub/protocol"
)

// Surveys are the bus's generic requests of one node by another, by an
// operation name (bus.Server.Survey): the journal's searches of a
// cluster's page are one (docs/CLUSTER.md, "Journal searches"). The
// operations are the bus's add-ons', which register after the node
// started; so a node takes every operation on one subject and its
// handler tells them apart.

// surveySubject is where node answers the surveys of op; with op "*",
// the subscription to all of them.
func surveySubject(node, op string) string { return "bub.node." + node + ".survey." + op }

// Survey asks node to answer req with its Survey handler for op, and
// returns what it answered. ctx bounds the wait. Errors: ErrNodeGone when
// no node serves the subject, ErrDeliveryTimeout when ctx ended first,
// ErrSurveyFailed with the handler's error text, ErrClosed after Close.
//
// The request goes over this node's own NATS connection, and the
// answering node takes requests only from its subscription on its own:
// a survey may carry what the asking node decided (the journal's: its
// reader's rights), so it must come from a node of the cluster
// (docs/CLUSTER.md, "Journal searches").
func (n *Node) Survey(ctx context.Context, node, op string, req []byte) ([]byte, error) {
	if !protocol.ValidNodeID(op) {
		return nil, fmt.Errorf("cluster: survey of node %s: %q is not an operation name", node, op)
	}
	return n.ask(ctx, node, &nats.Msg{Subject: surveySubject(node, op), Data: req}, ErrSurveyFailed, nil, func() string { return op + " survey of node " + node })
}

// startSurveyService answers surveys with the handler, each on a
// goroutine of its own (a journal search reads up to a page of the
// journal, and must not hold up the next).
func (n *Node) startSurveyService() error {
	all := surveySubject(n.id, "*")
	s, err := n.nc.Subscribe(all, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		if !n.goFunc(func() { n.serveSurvey(m) }) {
			respond(m, nil, ErrClosed)
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", all, err)
	}
	n.natsSubs = append(n.natsSubs, s)
	return nil
}

// serveSurvey runs the Survey handler for one request and answers it.
func (n *Node) serveSurvey(m *nats.Msg) {
	if n.handler.Survey == nil {
		respond(m, nil, errors.New("this node answers no survey (no Survey handler)"))
		return
	}
	op := strings.TrimPrefix(m.Subject, surveySubject(n.id, ""))
	result, err := n.handler.Survey(n.ctx, op, m.Data)
	respond(m, result, err)
}
