package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/bcp/gateway"
	"github.com/bub-bus/bub/peer"
)

// RefusedError is the gateway's refusal of a query, answer or publish.
type RefusedError struct {
	// Code is the refusal's code (budget_exhausted, unknown_query,
	// too_many_words, ...; docs/BCP.md section 11).
	Code string
	// Message is the gateway's whole ack message.
	Message string
}

func (e *RefusedError) Error() string { return "bcp: refused: " + e.Message }

// ErrNoGateway means no gateway handled the message: it is not running,
// or not subscribed to the topic.
var ErrNoGateway = fmt.Errorf("bcp: no gateway answered")

// send publishes payload on topic and turns the gateway's ack into an
// error; it returns the bus's messageId and the ack's message.
func send(ctx context.Context, conn *peer.Conn, topic string, payload any) (string, string, error) {
	res, err := conn.SendMessage(ctx, topic, payload, nil)
	if err != nil {
		return "", "", err
	}
	if len(res.Acks) == 0 || res.Acks[0].Error != "" {
		return res.MessageID, "", fmt.Errorf("%w on %s (%s)", ErrNoGateway, topic, res.Reason)
	}
	a := res.Acks[0]
	if !a.Processed {
		code, _, _ := strings.Cut(a.Message, ":")
		return res.MessageID, a.Message, &RefusedError{Code: code, Message: a.Message}
	}
	return res.MessageID, a.Message, nil
}

// Controller asks Readers through the gateway.
type Controller struct {
	conn *peer.Conn
}

// NewController returns a Controller that sends on conn, whose clientId
// is the Controller's agent name.
func NewController(conn *peer.Conn) *Controller { return &Controller{conn: conn} }

// Query sends a Category-1 or -2 query to reader and returns its id at
// once; the answer comes to the handler as a delivery or a failure. A
// refusal is a *RefusedError.
func (c *Controller) Query(ctx context.Context, reader string, spec *bcp.Spec) (string, error) {
	return c.query(ctx, reader, spec, "")
}

// Escalate sends a Category-3 query, which needs a justification (why a
// lower category will not do) and two human approvals.
func (c *Controller) Escalate(ctx context.Context, reader string, spec *bcp.Spec, justification string) (string, error) {
	return c.query(ctx, reader, spec, justification)
}

func (c *Controller) query(ctx context.Context, reader string, spec *bcp.Spec, justification string) (string, error) {
	if spec == nil {
		return "", fmt.Errorf("bcp: query to %s: nil spec", reader)
	}
	if err := spec.Check(); err != nil {
		return "", fmt.Errorf("bcp: query to %s: %w", reader, err)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	var req map[string]any
	if err := json.Unmarshal(data, &req); err != nil {
		return "", err
	}
	req["type"], req["target"] = gateway.TypeQueryRequest, reader
	if justification != "" {
		req["justification"] = justification
	}
	_, msg, err := send(ctx, c.conn, gateway.TopicQuery, req)
	if err != nil {
		return "", err
	}
	return gateway.QueryIDOf(msg), nil
}

// StartSession starts a new session: the gateway resets the Controller's
// budgets.
func (c *Controller) StartSession(ctx context.Context) error {
	_, _, err := send(ctx, c.conn, gateway.TopicQuery, map[string]string{"type": gateway.TypeSessionStart})
	return err
}

// ControllerHandler is what a Controller does with what the gateway
// sends it. A nil func ignores that message.
type ControllerHandler struct {
	// OnDelivery gets a validated answer or publish.
	OnDelivery func(ctx context.Context, d *gateway.ResponseDelivery) error
	// OnFailure gets a query that will not be answered.
	OnFailure func(ctx context.Context, f *gateway.QueryFailed) error
}

// Handler returns the peer.Handler to subscribe to agent:{controller}.
// It trusts only messages from the gateway's clientId; anything else is
// answered not processed.
func (c *Controller) Handler(gatewayID string, h ControllerHandler) peer.Handler {
	return func(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
		if d.From != gatewayID {
			return peer.Result{Message: "not from the BCP gateway"}, nil
		}
		var err error
		switch d.Type() {
		case gateway.TypeResponseDelivery:
			var m gateway.ResponseDelivery
			if err = d.Decode(&m); err == nil && h.OnDelivery != nil {
				err = h.OnDelivery(ctx, &m)
			}
		case gateway.TypeQueryFailed:
			var m gateway.QueryFailed
			if err = d.Decode(&m); err == nil && h.OnFailure != nil {
				err = h.OnFailure(ctx, &m)
			}
		default:
			return peer.Result{Message: "not a BCP message: " + d.Type()}, nil
		}
		if err != nil {
			return peer.Result{}, err
		}
		return peer.Result{Processed: true}, nil
	}
}

// Reader answers queries and publishes through the gateway.
type Reader struct {
	conn *peer.Conn

	// mu guards subs and listed.
	mu   sync.Mutex
	subs []bcp.ActiveSubscription
	// listed is set by the first bcp_subscriptions_active.
	listed bool
}

// listWait is how soon the bus tries again a gateway message that came
// before the Reader's first list.
const listWait = time.Second

// NewReader returns a Reader that sends on conn.
func NewReader(conn *peer.Conn) *Reader { return &Reader{conn: conn} }

// Respond answers a query. response is the answer object in either shape
// of docs/BCP.md section 2. It returns the gateway's status, or a
// *RefusedError whose Code is the validator's (the answer may be sent
// again until the attempts run out).
func (r *Reader) Respond(ctx context.Context, queryID string, response any) (string, error) {
	_, msg, err := send(ctx, r.conn, gateway.TopicResponse, map[string]any{"type": gateway.TypeResponse, "query_id": queryID, "response": response})
	return msg, err
}

// Publish publishes against controller's subscription id.
func (r *Reader) Publish(ctx context.Context, controller, subscriptionID string, response any) (string, error) {
	_, msg, err := send(ctx, r.conn, gateway.TopicResponse, map[string]any{
		"type": gateway.TypeResponse, "subscription_id": subscriptionID, "controller": controller, "response": response,
	})
	return msg, err
}

// Subscriptions returns the subscriptions the gateway last said are
// active for this Reader.
func (r *Reader) Subscriptions() []bcp.ActiveSubscription {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bcp.ActiveSubscription(nil), r.subs...)
}

// ReaderHandler is what a Reader does with what the gateway sends it.
type ReaderHandler struct {
	// OnQuery gets a query to answer with Respond (it may answer from
	// within the handler).
	OnQuery func(ctx context.Context, q *gateway.QueryMessage) error
	// OnResult gets the verdict on an answer or publish.
	OnResult func(ctx context.Context, v *gateway.ValidationResult) error
	// OnSubscriptions gets the active subscriptions, whenever the gateway
	// sends them; Subscriptions returns the latest too.
	OnSubscriptions func(ctx context.Context, subs []bcp.ActiveSubscription) error
}

// Handler returns the peer.Handler to subscribe to agent:{reader}.
//
// The gateway sends the list of active subscriptions before anything
// else (docs/BCP.md, "Subscriptions"). A gateway message that overtakes
// the first list anyway (it was in flight as the Reader subscribed) is
// answered should_retry, so that the bus brings it again after the list.
func (r *Reader) Handler(gatewayID string, h ReaderHandler) peer.Handler {
	return func(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
		if d.From != gatewayID {
			return peer.Result{Message: "not from the BCP gateway"}, nil
		}
		r.mu.Lock()
		listed := r.listed
		r.mu.Unlock()
		if !listed && d.Type() != gateway.TypeSubscriptionsActive {
			return peer.Result{ShouldRetry: true, RetryAfter: listWait, Message: "waiting for bcp_subscriptions_active"}, nil
		}
		var err error
		switch d.Type() {
		case gateway.TypeQuery:
			var m gateway.QueryMessage
			if err = d.Decode(&m); err == nil && h.OnQuery != nil {
				err = h.OnQuery(ctx, &m)
			}
		case gateway.TypeValidationResult:
			var m gateway.ValidationResult
			if err = d.Decode(&m); err == nil && h.OnResult != nil {
				err = h.OnResult(ctx, &m)
			}
		case gateway.TypeSubscriptionsActive:
			var subs []bcp.ActiveSubscription
			if subs, err = decodeSubscriptions(d.Payload); err == nil {
				r.mu.Lock()
				r.subs, r.listed = subs, true
				r.mu.Unlock()
				if h.OnSubscriptions != nil {
					err = h.OnSubscriptions(ctx, subs)
				}
			}
		default:
			return peer.Result{Message: "not a BCP message: " + d.Type()}, nil
		}
		if err != nil {
			return peer.Result{}, err
		}
		return peer.Result{Processed: true}, nil
	}
}

// decodeSubscriptions reads bcp_subscriptions_active's flat entries back
// into specs.
func decodeSubscriptions(payload []byte) ([]bcp.ActiveSubscription, error) {
	var m struct {
		Subscriptions []map[string]json.RawMessage `json:"subscriptions"`
	}
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("bcp: bcp_subscriptions_active: %w", err)
	}
	out := make([]bcp.ActiveSubscription, 0, len(m.Subscriptions))
	for i, entry := range m.Subscriptions {
		var a bcp.ActiveSubscription
		for key, dst := range map[string]any{"subscription_id": &a.ID, "controller": &a.Controller, "max_pushes_per_hour": &a.MaxPushesPerHour} {
			if v, ok := entry[key]; ok {
				if err := json.Unmarshal(v, dst); err != nil {
					return nil, fmt.Errorf("bcp: bcp_subscriptions_active: subscriptions[%d].%s: %w", i, key, err)
				}
				delete(entry, key)
			}
		}
		spec, err := json.Marshal(entry)
		if err != nil {
			return nil, err
		}
		if a.Spec, err = bcp.ParseSpec(spec); err != nil {
			return nil, fmt.Errorf("bcp: bcp_subscriptions_active: subscriptions[%d]: %w", i, err)
		}
		out = append(out, a)
	}
	return out, nil
}
