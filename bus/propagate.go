package bus

import (
	"strconv"

	"github.com/bub-bus/bub/protocol"
)

// publish routes an accepted message and walks its chain: each subscriber
// in turn, newest matching subscription first, until one whose policy says
// stop. A failed delivery does not stop the walk; it is recorded in its
// ack. The result is returned once every delivery of the pass answered or
// failed.
func (s *Server) publish(m *Message) *protocol.SendMessageResult {
	m.ID = s.bootID + "-" + strconv.FormatUint(s.messageSeq.Add(1), 10)
	result := &protocol.SendMessageResult{MessageID: m.ID, Acks: []protocol.Ack{}}
	chain := s.router.route(m.Topic)
	if len(chain) == 0 {
		result.Reason = protocol.ReasonNoSubscribers
		s.metrics.published.WithLabelValues(protocol.ReasonNoSubscribers).Inc()
		return result
	}
	result.Success = true
	s.metrics.published.WithLabelValues("routed").Inc()
	for _, sub := range chain {
		d := &Delivery{Message: m, ClientID: sub.conn.clientID, Subscription: sub.pattern.String(), Attempt: 1, conn: sub.conn}
		r, err := s.deliver(s.ctx, d)
		ack := protocol.Ack{ClientID: d.ClientID, Subscription: d.Subscription}
		if err != nil {
			ack.Error = err.Error()
			result.Acks = append(result.Acks, ack)
			continue
		}
		ack.Processed, ack.Message, ack.StopPropagation = r.Handled(), r.Message, r.StopPropagation
		result.Acks = append(result.Acks, ack)
		if sub.policy.Stops(ack.Processed, ack.StopPropagation) {
			break
		}
	}
	return result
}
