package bus

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// One publish path for every door. A message comes in on a peer's
// WebSocket connection (sendMessage), by the HTTP API, through an
// incoming webhook or as a tool subscription's event; each is checked,
// limited and made idempotent by the same code:
//
//   - routeMessage checks sendMessage's params (topic rules, grant,
//     payload, meta) and routes them, in the publisher's order;
//   - accept applies the publisher's rate and the quotas of what it
//     makes the bus store (admit), then names the message and tells the
//     observers;
//   - Idempotently keeps a key's bounded result for the window;
//   - publishRouted walks the subscribers.
//
// A WebSocket connection runs these stages itself, split between its
// read loop and a goroutine (dispatch.go), because its read loop is the
// relay's hot path; every other door calls Publish, which runs them in
// one call. The WebSocket reader checks a frame's UTF-8 and size before
// it is parsed (rpcstream); Publish checks them for the other doors.

// A Publisher is who a message that does not come on a peer's own
// WebSocket connection is published as: an HTTP caller (per identity and
// clientId), an incoming webhook, a tool subscription. It is a
// connection that holds no subscription and takes no call (closed), made
// by NewPublisher only, so that limits, grants and the journal see it as
// they see a peer.
type Publisher struct {
	// order serializes the routing of its messages, which a WebSocket
	// connection's read loop does for it: its messages take their turns
	// at each subscriber in the order they were routed.
	order sync.Mutex
	c     *conn
}

// NewPublisher makes the publisher for clientID, publishing as identity
// ("" for none: the clientId is then who the limits count against).
// remote names it in the journal and logs; attrs are added to its log
// lines. It has no grant until SetGrant gives it one: on a bus with
// auth, a door that publishes for a caller authenticates it
// (Authenticate), decides what it may do as clientID (Authorize) and
// sets that (SetGrant), or gets the three done by PublisherFor. A
// publisher without a grant may publish to any topic but the bus's own:
// that is for an add-on's own publisher (an incoming webhook's, to the
// topic its configuration names), never for a caller's.
func (s *Server) NewPublisher(clientID, identity, remote string, attrs ...any) *Publisher {
	c := &conn{
		holding: holding{server: s, log: s.log.With(attrs...), subs: make(map[string]*subscription)},
		remote:  remote,
		cid:     s.connSeq.Add(1),
		since:   time.Now(),
		slots:   make(chan struct{}, s.opts.MaxInFlight),
	}
	// closed: it holds no subscription and arms no expiry timer.
	c.closed, c.initialized, c.publishOnly = true, true, true
	c.clientID, c.identity = clientID, identity
	return &Publisher{c: c}
}

// SetGrant sets what p publishes as: the principal its credential was
// found to be and what it may do (nil: everything, an open bus).
func (p *Publisher) SetGrant(principal *auth.Principal, access *auth.Access) {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	p.c.setAccessLocked(principal, access)
}

// PublishOptions say how a door wants a publish answered.
type PublishOptions struct {
	// Wait answers once the walk is done, with sendMessage's result;
	// without it the answer comes once the message is accepted (admitted
	// and routed, or held, or found to have no subscriber).
	Wait bool
	// Remote is the request's address, for the journal: a publisher may
	// serve requests from several.
	Remote string
	// Header is the HTTP request's, for the publish hooks (a traceparent:
	// bus/otel).
	Header http.Header
	// Key is the idempotency key ("" for none), and Sum tells a repeat
	// of the request from another that uses the key.
	Key string
	Sum []byte
}

// Published is what Publish answers.
type Published struct {
	MessageID string
	// Result is sendMessage's result: with wait, or when the message had
	// no subscriber to walk; for a replayed idempotent publish, the
	// bounded result kept (boundedResult).
	Result *protocol.SendMessageResult
	// Replayed is set when the idempotency key was used before with the
	// same request: nothing was published again.
	Replayed bool
}

// Publish checks params (sendMessage's) and publishes them as p, the one
// way in for every door but a peer's WebSocket connection (see above);
// o nil is the zero PublishOptions.
// ctx is not yet consulted: once accepted, a message is delivered or
// dead-lettered whatever becomes of its request.
func (s *Server) Publish(_ context.Context, p *Publisher, params []byte, o *PublishOptions) (*Published, error) {
	if err := rpcstream.CheckUTF8("the message", params); err != nil {
		return nil, err
	}
	if n := int64(len(params)); n > s.opts.MaxMessageBytes {
		return nil, protocol.Errorf(protocol.ErrLimitReached, "the message is %d bytes, more than %d (--max-message-bytes)", n, s.opts.MaxMessageBytes)
	}
	if !protocol.IsObject(params) {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "the message must be a JSON object {\"topic\": ..., \"payload\": ...}")
	}
	if o == nil {
		o = &PublishOptions{}
	}
	if o.Key == "" {
		return s.publishOnce(p, params, o)
	}
	p.c.mu.Lock()
	identity := p.c.limitKeyLocked()
	p.c.mu.Unlock()
	var answer *Published
	result, replayed, err := s.Idempotently(identity, o.Key, o.Sum, func() (*protocol.SendMessageResult, error) {
		var err error
		answer, err = s.publishOnce(p, params, o)
		if err != nil {
			return nil, err
		}
		if answer.Result != nil {
			return answer.Result, nil
		}
		return &protocol.SendMessageResult{MessageID: answer.MessageID, Acks: []protocol.Ack{}}, nil
	})
	if err != nil {
		return nil, err
	}
	if replayed {
		answer = &Published{MessageID: result.MessageID, Replayed: true}
		if o.Wait {
			answer.Result = result
		}
	}
	return answer, nil
}

// publishOnce routes, admits and publishes params as p.
func (s *Server) publishOnce(p *Publisher, params []byte, o *PublishOptions) (*Published, error) {
	c := p.c
	select {
	case c.slots <- struct{}{}:
	default:
		return nil, protocol.Errorf(protocol.ErrTooManyRequests, "%d requests of this publisher already running; wait for their answers", cap(c.slots))
	}
	if err := s.beginRequest(); err != nil {
		<-c.slots
		return nil, err
	}
	// The slot and the running request are held until the walk is done,
	// answered or not, as on a WebSocket connection.
	done := func() {
		s.requests.Done()
		<-c.slots
	}
	p.order.Lock()
	out, err := c.routeMessage(params)
	p.order.Unlock()
	if err == nil && out.callback != "" {
		out.pass()
		err = protocol.Errorf(protocol.ErrInvalidParams, "a tool posts its events to %s{id}, not as a message", protocol.PathCallbacks)
	}
	if err != nil {
		done()
		return nil, err
	}
	out.remote = o.Remote
	if err := out.accept(); err != nil {
		out.pass()
		done()
		return nil, err
	}
	answer := &Published{MessageID: out.message.ID}
	walk := func() (*protocol.SendMessageResult, error) {
		defer done()
		defer out.pass()
		return s.publishRouted(&out.message, o.Header, out.chain, out.tickets, true)
	}
	if !o.Wait && len(out.chain) > 0 {
		go func() { _, _ = walk() }()
		return answer, nil
	}
	result, err := walk()
	if err != nil {
		return nil, err
	}
	answer.Result = result
	return answer, nil
}
