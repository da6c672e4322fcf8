package bus

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/bub-bus/bub/protocol"
)

// Requests from one node of a cluster to another for the add-ons, as
// centrifuge's Survey and OnSurvey: an add-on registers what it answers
// under an operation name, and asks another node by that name, so that
// no add-on adds a method to the Cluster seam. The journal asks every
// node for its part of a page this way (bus/journal).

// A SurveyHandler answers another node's request of one operation: req
// is what the asking node sent, as the add-on encodes it, and the answer
// goes back to it as it is; an error goes back as its text. ctx ends
// when the node leaves its cluster.
type SurveyHandler func(ctx context.Context, req []byte) ([]byte, error)

// OnSurvey registers h to answer the other nodes' requests of op, a name
// of letters, digits, '-' and '_' (one token of the cluster's subjects).
// A name registered before is refused. OnSurvey may be called only from
// Extend.
func (s *Server) OnSurvey(op string, h SurveyHandler) error {
	if !protocol.ValidNodeID(op) {
		return fmt.Errorf("survey operation %q: want letters, digits, '-' and '_'", op)
	}
	if _, dup := s.surveys.LoadOrStore(op, h); dup {
		return fmt.Errorf("survey operation %q is registered already", op)
	}
	return nil
}

// Survey asks node to answer req with its handler of op (OnSurvey) and
// returns the answer. ctx bounds the wait. Errors: ErrNodeGone (no such
// node, or a single node), ErrRemoteTimeout, and the handler's error,
// with its text.
func (s *Server) Survey(ctx context.Context, node, op string, req []byte) ([]byte, error) {
	return s.cl.cluster.Survey(ctx, node, op, req)
}

// LiveNodes returns the nodes this one hears from, itself included; none
// for a single node.
func (s *Server) LiveNodes() []string { return s.cl.cluster.Live() }

// Survey answers another node's request of op with the handler this
// node registered for it. A handler that panics is counted and logged
// as a panicking request is, and answered with an error.
func (cl *clusterState) Survey(ctx context.Context, op string, req []byte) (answer []byte, err error) {
	s := cl.server
	h, ok := s.surveys.Load(op)
	if !ok {
		return nil, fmt.Errorf("node %s answers no survey %q", cl.self, op)
	}
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panics.WithLabelValues(panicRequest).Inc()
			s.log.Error("survey of another node panicked", "op", op, "panic", p, "stack", string(debug.Stack()))
			answer, err = nil, fmt.Errorf("the %s survey failed inside node %s; its log has the details", op, cl.self)
		}
	}()
	return h.(SurveyHandler)(ctx, req)
}
