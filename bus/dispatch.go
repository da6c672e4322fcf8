package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// method is how the bus serves one method. methods is the one table of
// them: the read loop, the checks before a handler and the metric labels
// all read it, so a method is served, checked and counted as one entry
// says or not at all.
type method struct {
	// queued methods wait on subscribers or the store, so they run on a
	// goroutine of their own, bounded by Options.MaxInFlight; the others
	// are answered inline on the read loop.
	queued bool
	// inOrder methods write to the cluster, which can wait seconds, so
	// they, and the requests read while one waits, run on the
	// connection's in-order goroutine (inorder.go).
	inOrder bool
	// admin methods need a credential with admin.
	admin bool
	// open methods may be called before initialize.
	open bool
	// serve answers the request, after the checks above.
	serve func(*conn, *rpcstream.Request) (any, error)
	// route, set instead of serve for sendMessage, checks and routes the
	// message on the read loop (order.go); what it returns is published
	// off it. It makes its checks itself, initialize first among them,
	// in its one look at the connection.
	route func(*conn, *rpcstream.Request) (*outgoing, error)
}

// methods are the methods the bus serves; any other answers -32601.
var methods map[string]method

// init fills methods. The table is filled here, not where it is declared,
// because its handlers reach, through the walk's answer to a relayed
// sendMessage, the code that reads it (methodLabel): a variable's
// initializer may not refer to itself, an init function may.
func init() {
	methods = map[string]method{
		protocol.MethodInitialize:         {open: true, inOrder: true, serve: (*conn).initialize},
		protocol.MethodPing:               {serve: (*conn).ping},
		protocol.MethodSubscribe:          {inOrder: true, serve: (*conn).subscribe},
		protocol.MethodUnsubscribe:        {inOrder: true, serve: (*conn).unsubscribe},
		protocol.MethodSendMessage:        {queued: true, route: func(c *conn, req *rpcstream.Request) (*outgoing, error) { return c.routeMessage(req.Params) }},
		protocol.MethodSubscriptionsWaker: {inOrder: true, serve: (*conn).subscriptionsWaker},
	}
}

// run checks that the connection may call m, then serves req.
func (m method) run(c *conn, req *rpcstream.Request) (any, error) {
	if !m.open {
		if err := c.requireInitialized(req.Method); err != nil {
			return nil, err
		}
	}
	if m.admin {
		if err := c.checkAdmin(req.Method); err != nil {
			return nil, err
		}
	}
	return m.serve(c, req)
}

// handle runs on the connection's read loop, or on its in-order goroutine
// (inorder.go), one request at a time in the order the peer sent them. It
// answers the quick methods (initialize, subscribe, unsubscribe, ping)
// there, which keeps a peer's subscriptions in the order it sent them,
// and checks and routes sendMessage there for the same reason; the walk
// of a routed message and the dlq.* methods run on a goroutine of their
// own, bounded by
// Options.MaxInFlight: a peer waiting for its own sendMessage can still
// answer processMessage calls, and a full connection gets -32006 at once
// instead of a blocked read loop. On the read loop (onReader), a
// message's walk starts there, without a goroutine (direct.go).
func (c *conn) handle(req *rpcstream.Request, onReader bool) {
	if req.Notif() {
		// No bus method is a notification, and notifications are never
		// answered, not even with an error.
		c.log.Debug("ignoring notification", "method", req.Method)
		return
	}
	if onReader {
		// What is answered here leaves with the rest of the batch read.
		c.out.Batch().Hold(c.out)
	}
	m, ok := c.server.methods[req.Method]
	if !ok {
		c.reply(req, nil, protocol.Errorf(protocol.ErrMethodNotFound, "no method %q (docs/PROTOCOL.md lists the methods)", req.Method))
		return
	}
	if !m.queued {
		result, err := c.guard(req, func(req *rpcstream.Request) (any, error) { return m.run(c, req) })
		c.reply(req, result, err)
		if req.Method == protocol.MethodInitialize && protocol.CodeOf(err) == protocol.CodeUnauthorized {
			// The answer says why; the connection has nothing more to do.
			c.close(websocket.StatusCode(protocol.CloseUnauthorized), closeUnauthorized)
		}
		return
	}
	select {
	case c.slots <- struct{}{}:
	default:
		c.reply(req, nil, protocol.Errorf(protocol.ErrTooManyRequests, "%d requests already running on this connection; wait for their results", cap(c.slots)))
		return
	}
	// Registered as running work until the answer is written, so
	// Shutdown's drain covers the reply too.
	if err := c.server.beginRequest(); err != nil {
		<-c.slots
		c.reply(req, nil, err)
		return
	}
	work := func(req *rpcstream.Request) (any, error) { return m.run(c, req) }
	if m.route != nil {
		// Routed here, in the connection's order, so that its messages
		// take their turns at each subscriber in the order it sent them
		// (order.go).
		var out *outgoing
		result, err := c.guard(req, func(req *rpcstream.Request) (any, error) {
			var err error
			out, err = m.route(c, req)
			return nil, err
		})
		if out == nil {
			c.finishRequest(req, result, err)
			return
		}
		if onReader && c.relayOnLoop(req, out) {
			return
		}
		work = out.publish
	}
	go func() {
		result, err := c.guard(req, work)
		c.finishRequest(req, result, err)
	}()
}

// finishRequest answers a request that took a slot and a running
// request (dispatch). The slot is given back before the answer is
// written, so a peer that sends its next request on reading the answer
// finds room for it; the request ends once the answer is written, so
// Shutdown's drain covers the reply.
func (c *conn) finishRequest(req *rpcstream.Request, result any, err error) {
	defer c.server.requests.Done()
	<-c.slots
	c.reply(req, result, err)
}

// finishRequestRaw is finishRequest for a sendMessage whose result is
// encoded already, body.
func (c *conn) finishRequestRaw(req *rpcstream.Request, body []byte) {
	defer c.server.requests.Done()
	<-c.slots
	c.server.metrics.requests.WithLabelValues(c.server.methodLabel(req.Method), outcomeOf(nil)).Inc()
	// A failed write closes the connection, which the read loop notices.
	if err := c.stream.ReplyRaw(req.ID, body); err != nil {
		c.log.Debug("reply failed", "method", req.Method, "err", err)
	}
}

// ping answers with the bus's clock.
func (c *conn) ping(*rpcstream.Request) (any, error) {
	return protocol.PingResult{Timestamp: time.Now().UTC().Format(time.RFC3339)}, nil
}

func (c *conn) reply(req *rpcstream.Request, result any, err error) {
	c.server.metrics.requests.WithLabelValues(c.server.methodLabel(req.Method), outcomeOf(err)).Inc()
	var werr *protocol.Error
	if err != nil {
		werr = protocol.WireError(err)
	}
	// A failed write closes the connection, which the read loop notices.
	if err := c.stream.Reply(req.ID, result, werr); err != nil {
		c.log.Debug("reply failed", "method", req.Method, "err", err)
	}
}

func outcomeOf(err error) string {
	if err == nil {
		return "ok"
	}
	return fmt.Sprint(protocol.CodeOf(err))
}

// decodeParams decodes a request's params object into v, naming the field
// at fault when it cannot.
func decodeParams(req *rpcstream.Request, v any) error {
	return DecodeParams(req.Method, req.Params, v)
}

// paramsObject refuses params that are absent, null or positional.
func paramsObject(method string, params []byte) error {
	if params == nil || string(params) == "null" {
		return protocol.Errorf(protocol.ErrInvalidParams, "%s needs a params object", method)
	}
	if !protocol.IsObject(params) {
		return protocol.Errorf(protocol.ErrInvalidParams, "%s params must be an object, not positional", method)
	}
	return nil
}

// paramsError turns an error decoding method's params into -32602, naming
// the field at fault when there is one; nil stays nil.
func paramsError(method string, err error) error {
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return protocol.Errorf(protocol.ErrInvalidParams, "%s: %q must be a JSON %s, got %s", method, typeErr.Field, typeErr.Type.Kind(), typeErr.Value)
	}
	return protocol.Errorf(protocol.ErrInvalidParams, "%s: %v", method, err)
}

// requireInitialized refuses every method but initialize before
// initialize.
func (c *conn) requireInitialized(method string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.initialized {
		return protocol.Errorf(protocol.ErrNotInitialized, "call initialize before %s", method)
	}
	return nil
}

func (c *conn) initialize(req *rpcstream.Request) (any, error) {
	s := c.server
	c.mu.Lock()
	already := c.initialized
	c.mu.Unlock()
	if already {
		return nil, protocol.Errorf(protocol.ErrAlreadyInitialized, "this connection initialized as %q", c.id())
	}
	var p protocol.InitializeParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if err := protocol.ValidateClientID(p.ClientID); err != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidClientInfo, "%v", err)
	}
	if err := c.server.checkReservedClientID(c.log, p.ClientID); err != nil {
		return nil, err
	}
	if p.DefaultTopic != "" {
		if err := protocol.ValidateTopic(p.DefaultTopic); err != nil {
			return nil, protocol.Errorf(protocol.ErrInvalidParams, "defaultTopic: %v", err)
		}
	}

	grant, err := c.authorizeInitialize(&p)
	if err != nil {
		return nil, err
	}
	if !p.PublishOnly {
		// The connection holding the clientId on another node closes
		// there, as taken over.
		if err := s.cl.claim(c, p.ClientID); err != nil {
			return nil, err
		}
	}

	old, err := c.commitInitialize(&p, &grant)
	if err != nil {
		if !p.PublishOnly {
			s.cl.release(c, p.ClientID)
		}
		return nil, err
	}
	identity := ""
	if grant.principal != nil {
		identity = grant.principal.Name()
	}

	if old != nil && old != c {
		n := old.takeOver()
		c.log.Info("client taken over by a new connection", "client", p.ClientID, "identity", identity, "old_remote", old.remote, "dropped_subscriptions", n)
	}
	info := "-"
	if p.ClientInfo != nil {
		info = p.ClientInfo.Name + " " + p.ClientInfo.Version
	}
	if p.PublishOnly {
		c.log.Debug("publish-only client initialized", "client", p.ClientID, "identity", identity, "client_info", info)
	} else {
		c.log.Info("client initialized", "client", p.ClientID, "identity", identity, "client_info", info, "default_topic", p.DefaultTopic)
		s.events.clientEvent(TopicClientConnected, "connected", p.ClientID, identity, "", false, "")
	}
	return protocol.InitializeResult{
		ProtocolVersion: protocol.Version,
		ServerID:        s.opts.ServerID,
		ServerInfo:      protocol.ServerInfo{Name: buildinfo.Name, Version: buildinfo.Version()},
		Capabilities: protocol.Capabilities{
			Subscribe:      true,
			Publish:        true,
			ProcessMessage: true,
			Topics:         []string{"inbound:*", "outbound:*", "agent:*", "system:*"},
			Policies:       protocol.Policies,
		},
		Limits: &protocol.Limits{
			MaxMessageBytes:   s.opts.MaxMessageBytes,
			DeliveryTimeoutMs: s.opts.DeliveryTimeout.Milliseconds(),
		},
	}, nil
}

// initializeHook, when set (by tests only), runs inside
// commitInitialize's locked section, where a test makes it panic.
var initializeHook func(clientID string)

// commitInitialize registers c as p.ClientID's connection and marks it
// initialized with grant, checked again first if a reload replaced its
// Authenticator (reauthorizeLocked), under the server's and the
// connection's locks, and returns the connection it takes over, if any. Both locks are released
// by defer: initialize runs inside guard, which recovers a panic, and
// the server's lock left held would stop every connection of the bus.
func (c *conn) commitInitialize(p *protocol.InitializeParams, grant *handshakeGrant) (old *conn, err error) {
	s := c.server
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return nil, protocol.Errorf(protocol.ErrShuttingDown, "no new clients")
	}
	if err := c.reauthorizeLocked(p, grant); err != nil {
		return nil, err
	}
	var slot func()
	if grant.principal != nil {
		if slot, err = c.takeIdentitySlot(grant.principal); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.identitySlot = slot
	if initializeHook != nil {
		initializeHook(p.ClientID)
	}
	if !p.PublishOnly {
		old = s.clients[p.ClientID]
		s.clients[p.ClientID] = c
	}
	c.initialized = true
	c.publishOnly = p.PublishOnly
	c.clientID = p.ClientID
	c.defaultTopic = p.DefaultTopic
	c.setAccessLocked(grant.principal, grant.access)
	return old, nil
}

func (c *conn) subscribe(req *rpcstream.Request) (any, error) {
	var p protocol.SubscribeParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	pattern, err := protocol.ParsePattern(p.Topic)
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "%v", err)
	}
	if err := c.checkPattern(p.Topic); err != nil {
		return nil, err
	}
	policy := p.Policy
	if policy == "" {
		policy = c.server.opts.DefaultPolicy
	} else if !policy.Valid() {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "policy %q is not one of %v", p.Policy, protocol.Policies)
	}
	if p.Durable {
		if err := c.subscribeDurable(p.Topic, pattern, policy, p.Fallback); err != nil {
			return nil, err
		}
	} else {
		sub, clientID, identity, err := c.addSubscription(p.Topic, pattern, policy, p.Fallback)
		if err != nil {
			return nil, err
		}
		if err := c.shareSubscription(sub, clientID, identity); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	clientID, identity := c.clientID, c.identity
	c.mu.Unlock()
	// Waking holds (a look at the held topics) and the event happen
	// after the connection's lock is released, so retry attempts and
	// publishes that read the connection do not wait on them. Order is
	// kept all the same: the connection's requests run one at a time
	// (handle), so its next subscribe, unsubscribe or disconnect, and
	// their events, come after these; and a hold woken here finds the new
	// subscription, which the router already has.
	c.server.sched.wakeHolds(pattern, clientID)
	c.server.events.clientEvent(TopicClientSubscribed, "subscribed", clientID, identity, p.Topic, p.Fallback, "")
	c.log.Debug("subscribed", "client", clientID, "pattern", p.Topic, "policy", policy)
	return protocol.SuccessResult{Success: true}, nil
}

// addSubscription checks and adds a subscription to topic under the
// connection's lock, and returns it with the clientId and identity it
// was made for. The subscription enters the router once the cluster has
// ordered it (shareSubscription).
func (c *conn) addSubscription(topic string, pattern *protocol.Pattern, policy protocol.Policy, fallback bool) (sub *subscription, clientID, identity string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.publishOnly {
		return nil, "", "", protocol.Errorf(protocol.ErrInvalidParams, "this connection initialized with publishOnly and cannot subscribe")
	}
	if c.closed {
		return nil, "", "", protocol.Errorf(protocol.ErrShuttingDown, "connection is closing")
	}
	if _, dup := c.subs[topic]; dup {
		return nil, "", "", protocol.Errorf(protocol.ErrAlreadySubscribed, "this connection already subscribed to %q", topic)
	}
	if err := c.checkSubscriptions(len(c.subs)); err != nil {
		return nil, "", "", err
	}
	if err := c.checkSubscribe(pattern, fallback); err != nil {
		return nil, "", "", err
	}
	sub = &subscription{pattern: pattern, policy: policy, fallback: fallback, to: c}
	c.subs[topic] = sub
	c.server.metrics.subscriptions.Inc()
	return sub, c.clientID, c.identity, nil
}

func (c *conn) unsubscribe(req *rpcstream.Request) (any, error) {
	var p protocol.UnsubscribeParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if p.Topic == "" {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "topic is required")
	}
	sub, clientID, identity := c.removeSubscription(p.Topic)
	if sub == nil {
		return nil, protocol.Errorf(protocol.ErrSubscriptionNotFound, "this connection holds no subscription to %q", p.Topic)
	}
	c.server.cl.unshareNow(sub)
	if sub.durable {
		// The owner ends it: its record goes too.
		if _, err := c.server.durables.unsubscribeDurable(clientID, p.Topic); err != nil {
			return nil, protocol.Errorf(protocol.ErrInternal, "unsubscribe %q: the durable subscription was not removed from the store: %v", p.Topic, err)
		}
	}
	// After the unlock, as in subscribe; handle keeps the order.
	c.server.events.clientEvent(TopicClientUnsubscribed, "unsubscribed", clientID, identity, p.Topic, sub.fallback, "")
	return protocol.SuccessResult{Success: true}, nil
}

// removeSubscription removes the connection's subscription to topic
// and returns it, nil if there is none, with the clientId and identity
// it was made for. The lock is released by defer, as in
// commitInitialize.
func (c *conn) removeSubscription(topic string) (sub *subscription, clientID, identity string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sub = c.subs[topic]
	if sub != nil {
		delete(c.subs, topic)
		c.server.router.remove(sub)
		c.server.metrics.subscriptions.Dec()
	}
	return sub, c.clientID, c.identity
}

// outgoing is a sendMessage checked and routed in the connection's order
// (handle), to be published off it.
type outgoing struct {
	conn    *conn
	message store.Message
	chain   []*subscription
	tickets []ticket
	// scratch, for a chain of several subscribers, holds tickets; a walk
	// relayed on the read loops gives it back when it ends (relayOnLoop).
	scratch *walkScratch
	// callback is set for an event sent to callback:{id}: the bus hands
	// it to its CallbackFunc (doors.go), routed to nobody.
	callback string
	// remote is the publisher's address when it is not conn's (an HTTP
	// request), for the journal.
	remote string
}

// routeMessage checks sendMessage's params, routes them and takes
// their tickets (order.go): the checks every door's messages take
// (publish.go). It runs in the publisher's order (handle, Publish):
// params are read in place, in one pass, and nothing here waits on a
// peer or the store.
func (c *conn) routeMessage(params []byte) (*outgoing, error) {
	const method = protocol.MethodSendMessage
	// One look at the connection for everything the checks need.
	c.mu.Lock()
	initialized, from, access, identity, defaultTopic := c.initialized, c.clientID, c.access, c.identity, c.defaultTopic
	c.mu.Unlock()
	if !initialized {
		return nil, protocol.Errorf(protocol.ErrNotInitialized, "call initialize before %s", method)
	}
	if err := paramsObject(method, params); err != nil {
		return nil, err
	}
	p, payloadErr, err := protocol.ScanSendMessage(params)
	if err != nil {
		return nil, paramsError(method, err)
	}
	if p.Topic == "" {
		p.Topic = defaultTopic
	}
	if p.Topic == "" {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "topic is required: this connection set no defaultTopic in initialize")
	}
	if err := protocol.ValidateTopic(p.Topic); err != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "%v", err)
	}
	if err := c.checkTopic(p.Topic); err != nil {
		return nil, err
	}
	if id, ok := strings.CutPrefix(p.Topic, protocol.CallbackTopicPrefix); ok {
		return &outgoing{conn: c, message: store.Message{Topic: p.Topic, Payload: p.Payload}, callback: id}, nil
	}
	if err := c.checkPublish(access, identity, from, p.Topic); err != nil {
		return nil, err
	}
	if payloadErr != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "%v", payloadErr)
	}
	if p.Meta != nil && string(p.Meta) != "null" && !protocol.IsObject(p.Meta) {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "meta must be a JSON object")
	}
	out := &outgoing{conn: c, message: store.Message{Topic: p.Topic, From: from, Payload: p.Payload, Meta: p.Meta}}
	out.chain = c.server.router.route(p.Topic)
	if len(out.chain) > 1 {
		// Kept from fan-out to fan-out (walkScratch).
		out.scratch = getWalkScratch(len(out.chain))
		out.tickets = c.lanes.issue(out.chain, out.scratch.tickets)
		out.scratch.tickets = out.tickets
	} else {
		out.tickets = c.lanes.issue(out.chain, nil)
	}
	return out, nil
}

// publish admits and publishes a routed sendMessage, off the read loop.
// Whatever happens, its tickets are passed, so the publisher's next
// messages are not kept waiting.
func (out *outgoing) publish(req *rpcstream.Request) (any, error) {
	defer out.pass()
	if out.callback != "" {
		return out.conn.server.callbackEvent(out.callback, out.message.Payload)
	}
	s := out.conn.server
	key, err := protocol.IdempotencyKeyOf(out.message.Meta)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return out.acceptAndWalk()
	}
	// meta.idempotency_key: a repeat gets the first result and publishes
	// nothing (idempotency.go), even once the limits would refuse a new
	// message.
	c := out.conn
	c.mu.Lock()
	identity := c.limitKeyLocked()
	c.mu.Unlock()
	result, _, err := s.Idempotently(identity, key, idempotencySum(req.Params), out.acceptAndWalk)
	if err != nil {
		return nil, err
	}
	return result, nil
}

// accept admits the message (admit) and, admitted, names it and tells
// the observers (accepted): what every door does to a routed message before its
// walk.
func (out *outgoing) accept() error {
	if err := out.admit(); err != nil {
		return err
	}
	out.accepted()
	return nil
}

// acceptAndWalk accepts the message and walks its chain to the end.
func (out *outgoing) acceptAndWalk() (*protocol.SendMessageResult, error) {
	if err := out.accept(); err != nil {
		return nil, err
	}
	return out.conn.server.publishRouted(&out.message, nil, out.chain, out.tickets, true)
}

// admit applies the publish-path limits (admitPublish) and notes who
// the message is published as.
func (out *outgoing) admit() error {
	identity, err := out.conn.admitPublish()
	if err != nil {
		return err
	}
	out.message.Publisher = identity
	return nil
}

// accepted names the message and tells the observers it was accepted; a repeat of
// an idempotent publish, which publishes nothing, never gets here.
func (out *outgoing) accepted() {
	s := out.conn.server
	s.name(&out.message)
	s.observers.emitAccepted(out.conn, &out.message, out.remote)
}

// pass passes the message's tickets, so the publisher's next messages
// are not kept waiting.
func (out *outgoing) pass() {
	for i := range out.tickets {
		out.tickets[i].pass()
	}
}
