package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// delivery is one attempt to hand a message to one subscriber. The
// subscriber is named by identity (clientId and pattern) so a later attempt
// can reach the same client on a new connection.
type delivery struct {
	Message      *store.Message
	ClientID     string
	Subscription string
	Attempt      int // from 1
	conn         *conn
}

// deliverFunc makes one delivery and returns the subscriber's answer, or a
// *deliveryError when there was none.
type deliverFunc func(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error)

// layer wraps a deliverFunc with one per-attempt concern. Retries and
// dead-lettering are decided per routing pass (propagate.go, retry.go),
// not per attempt, so they are not layers.
type layer func(deliverFunc) deliverFunc

// chain builds the delivery pipeline, outermost layer first.
func (s *Server) chain() deliverFunc {
	layers := []layer{s.measure, s.timeout}
	deliver := deliverFunc(s.call)
	for i := len(layers) - 1; i >= 0; i-- {
		deliver = layers[i](deliver)
	}
	return deliver
}

// Failure kinds of a delivery, also its metrics outcome.
const (
	failTimeout      = "timeout"
	failDisconnected = "disconnected"
	failError        = "error"
	failBadResult    = "bad_result"
)

// deliveryError says why a delivery got no usable answer.
type deliveryError struct {
	Kind   string // one of the fail… constants, or a reason such as subscriber_gone
	Detail string
}

func (e *deliveryError) Error() string {
	return e.Kind + ": " + e.Detail
}

// call sends processMessage to the subscriber's connection and waits for
// its answer.
func (s *Server) call(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
	var raw json.RawMessage
	params := protocol.ProcessMessageParams{
		Topic:        d.Message.Topic,
		Subscription: d.Subscription,
		Payload:      d.Message.Payload,
		MessageID:    d.Message.ID,
		From:         d.Message.From,
		Meta:         d.Message.Meta,
		Attempt:      d.Attempt,
	}
	err := d.conn.rpc.Call(ctx, protocol.MethodProcessMessage, params, &raw)
	var result protocol.ProcessMessageResult
	var rpcErr *jsonrpc2.Error
	switch {
	case err == nil:
		if !protocol.IsObject(raw) {
			return result, &deliveryError{failBadResult, fmt.Sprintf("processMessage result must be an object, got %.64s", raw)}
		}
		if err := json.Unmarshal(raw, &result); err != nil {
			return result, &deliveryError{failBadResult, fmt.Sprintf("processMessage result: %v", err)}
		}
		return result, nil
	case errors.Is(err, context.DeadlineExceeded):
		return result, &deliveryError{failTimeout, fmt.Sprintf("no answer within %s", s.opts.DeliveryTimeout)}
	case errors.As(err, &rpcErr):
		return result, &deliveryError{failError, fmt.Sprintf("subscriber answered error %d: %s", rpcErr.Code, rpcErr.Message)}
	case errors.Is(err, jsonrpc2.ErrClosed):
		return result, &deliveryError{failDisconnected, "connection closed before the subscriber answered"}
	default:
		return result, &deliveryError{failDisconnected, err.Error()}
	}
}

// timeout bounds each attempt by Options.DeliveryTimeout.
func (s *Server) timeout(next deliverFunc) deliverFunc {
	return func(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
		ctx, cancel := context.WithTimeout(ctx, s.opts.DeliveryTimeout)
		defer cancel()
		return next(ctx, d)
	}
}

// measure counts deliveries by outcome and observes their latency.
func (s *Server) measure(next deliverFunc) deliverFunc {
	return func(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
		start := time.Now()
		r, err := next(ctx, d)
		s.metrics.deliveryDuration.Observe(time.Since(start).Seconds())
		outcome := "not_processed"
		var derr *deliveryError
		switch {
		case errors.As(err, &derr):
			outcome = derr.Kind
		case err != nil:
			outcome = failError
		case r.Handled():
			outcome = "processed"
		}
		s.metrics.deliveries.WithLabelValues(outcome).Inc()
		return r, err
	}
}
