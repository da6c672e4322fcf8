package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/internal/redact"
	"github.com/bub-bus/bub/internal/streak"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// Options configure a Gateway. The zero value of a field means its
// default.
type Options struct {
	// BusURL is the bus's WebSocket URL. Default: peer.DefaultBusURL.
	BusURL string
	// ClientID is the gateway's clientId. Default: "bcp-gateway".
	ClientID string
	// Token is the gateway's credential. Its grant must allow publishing
	// to agent:* and subscribing to bcp:query, bcp:response and the
	// bus's system:client.* events (connected, subscribed, unsubscribed,
	// disconnected) (docs/BCP.md, "Running the gateway"); publishing to
	// system:bcp.* too for its events for operators (events.go), which
	// are dropped without it.
	Token string
	// Definitions are the agents, as bcp.LoadDefinitions returns them.
	// An agent's name is its clientId on the bus. Required.
	Definitions []*bcp.Definition
	// DataDir holds the state file (FileName). Required: without it a
	// restart would forget budgets and pending queries.
	DataDir string
	// MaxAttempts is how many answers a query may get before invalid
	// ones fail it with validation_failed. Default: 3.
	MaxAttempts int
	// QueryTTL is how long a query waits for a valid answer before it
	// fails with expired. Default: 10 minutes.
	QueryTTL time.Duration
	// sweepInterval is how often expired queries and approvals are
	// looked for: 1s, which the expiry times (minutes) make precise
	// enough. Tests shorten it.
	sweepInterval time.Duration
	// Approvers are the clientIds whose bcp_approval_decision the gateway
	// accepts on bcp:approval. Default: none, and then Category 3 is
	// refused (approval_unavailable): a summary is never delivered
	// without a human. An approver must not be an agent of the
	// definitions.
	Approvers []string
	// Relays are clientIds that decide for humans not on the bus (the
	// Telegram bridge), each with the humans it may act for: a relay's
	// bcp_approval_decision counts only when its on_behalf_of names one
	// of them ("tg:42", or "42" for any scheme). A relay must be neither
	// an agent nor an approver.
	Relays map[string][]string
	// ApprovalTTL is how long an approval waits for a decision.
	// Default: 1 hour.
	ApprovalTTL time.Duration
	// AlertShare is the share of a channel's budget whose spending, in
	// one session, publishes a bcp_budget_alert and moves
	// bub_bcp_budget_alerts_total. Default: 0.8.
	AlertShare float64
	// AlertTopic is where budget alerts go. It is outside bcp:* so that
	// no agent can publish a forged one. Default: "alert:bcp.budget".
	AlertTopic string
	// Logger receives the gateway's logs. Default: slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.BusURL == "" {
		o.BusURL = peer.DefaultBusURL
	}
	if o.ClientID == "" {
		o.ClientID = "bcp-gateway"
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	if o.QueryTTL <= 0 {
		o.QueryTTL = 10 * time.Minute
	}
	if o.sweepInterval <= 0 {
		o.sweepInterval = time.Second
	}
	if o.AlertShare <= 0 || o.AlertShare > 1 {
		o.AlertShare = 0.8
	}
	if o.AlertTopic == "" {
		o.AlertTopic = "alert:bcp.budget"
	}
	if o.ApprovalTTL <= 0 {
		o.ApprovalTTL = time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Gateway is a running BCP gateway. Start it with Start; stop it with
// Close.
type Gateway struct {
	opts     Options
	log      *slog.Logger
	registry *bcp.Registry
	state    *state
	// approvers is Options.Approvers as a set.
	approvers map[string]bool
	// approverNames are the approvers and relays, sorted: each hears the
	// approval requests on its own topic (ApprovalTopic).
	approverNames []string
	relays        map[string]relayUsers // Options.Relays as sets; each relay is in approvers too
	metrics       *metrics
	conn          *peer.Conn

	kick chan struct{} // wakes the sender
	// sendingMu guards sending: the topics whose queue a goroutine is
	// sending, each with whether it must look again before it stops
	// (something was queued while it was busy).
	sendingMu sync.Mutex
	sending   map[string]bool
	// failing holds the topics whose last send failed, so that the log
	// says once that a topic's sends fail and once that they go again,
	// not once per attempt. Guarded by sendingMu.
	failing map[string]bool
	// absent summarizes the approval messages dropped for an approver
	// with no client subscribed: every message goes to every approver, so
	// an approver away would otherwise be a line per message.
	absent *streak.Log
	// eventsRefused logs once that the bus refuses the events for
	// operators (events.go): a grant of an earlier version lacks their
	// topics, and a line per charge would drown the log.
	eventsRefused sync.Once
	stop          chan struct{}
	wg            sync.WaitGroup
	closed        sync.Once
}

// Start checks the definitions, opens the state file, connects to the bus
// and subscribes. It returns once the gateway serves; queued messages from
// before a restart are sent from then on.
func Start(ctx context.Context, opts Options) (*Gateway, error) {
	opts.setDefaults()
	if opts.DataDir == "" {
		return nil, errors.New("bcp gateway: no data dir: the gateway's budgets and pending queries must survive a restart")
	}
	if len(opts.Definitions) == 0 {
		return nil, errors.New("bcp gateway: no agent definitions")
	}
	registry, err := bcp.NewRegistry(opts.Definitions)
	if err != nil {
		return nil, fmt.Errorf("bcp gateway: agent definitions: %w", err)
	}
	approvers := make(map[string]bool, len(opts.Approvers))
	for _, a := range opts.Approvers {
		if registry.Definition(a) != nil {
			return nil, fmt.Errorf("bcp gateway: approver %q is an agent of the definitions; an agent must not approve what agents send", a)
		}
		if a != "" {
			approvers[a] = true
		}
	}
	relays, err := relaySets(opts.Relays, approvers, func(name string) bool { return registry.Definition(name) != nil })
	if err != nil {
		return nil, err
	}
	for name := range relays {
		approvers[name] = true
	}
	approverNames := slices.Sorted(maps.Keys(approvers))
	for _, name := range approverNames {
		if err := protocol.ValidateTopic(ApprovalTopic(name)); err != nil {
			return nil, fmt.Errorf("bcp gateway: approver %q cannot have an approval topic: %w", name, err)
		}
	}
	readers, err := readerInfos(registry, opts.Definitions)
	if err != nil {
		return nil, err
	}
	st, err := openState(opts.DataDir)
	if err != nil {
		return nil, err
	}
	st.readers = readers
	g := &Gateway{
		opts: opts, log: opts.Logger, registry: registry, state: st, approvers: approvers, approverNames: approverNames, relays: relays, metrics: newMetrics(st),
		kick: make(chan struct{}, 1), sending: map[string]bool{}, failing: map[string]bool{}, stop: make(chan struct{}),
	}
	g.absent = streak.New(absentApproverEvery, func(approver string, sum streak.Summary) {
		g.log.Warn(fmt.Sprintf("bcp gateway: approver still not connected; %d more approval messages dropped in the last %v", sum.Events, absentApproverEvery),
			"approver", approver, "dropped", sum.Total, "since", sum.Since)
	})
	st.metrics = g.metrics
	conn, err := peer.Dial(ctx, opts.BusURL, &peer.Options{
		ClientID:   opts.ClientID,
		ClientInfo: &protocol.ClientInfo{Name: "bub-bcp-gateway", Version: buildinfo.Version()},
		Token:      opts.Token,
		Logger:     opts.Logger,
	})
	if err != nil {
		st.close()
		return nil, fmt.Errorf("bcp gateway: connect to %s as %s: %w", redact.URLs(opts.BusURL), opts.ClientID, err)
	}
	g.conn = conn
	// The bus's client events go on to everyone else who listens (the
	// spawner waits for them): continueAll, or the gateway, as the newest
	// subscriber, would stop them at itself.
	observe := &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll}
	subs := []struct {
		pattern string
		handler peer.Handler
		opts    *peer.SubscribeOptions
	}{
		{protocol.TopicClientConnected, g.onClientConnected, observe},
		{protocol.TopicClientSubscribed, g.onClientSubscribed, observe},
		{protocol.TopicClientUnsubscribed, g.onClientGone, observe},
		{protocol.TopicClientDisconnected, g.onClientGone, observe},
		{TopicQuery, g.onQuery, nil},
		{TopicResponse, g.onResponse, nil},
	}
	if len(approvers) > 0 {
		subs = append(subs, struct {
			pattern string
			handler peer.Handler
			opts    *peer.SubscribeOptions
		}{TopicApproval, g.onApproval, nil})
	}
	for _, s := range subs {
		if err := conn.Subscribe(ctx, s.pattern, s.handler, s.opts); err != nil {
			conn.Close()
			st.close()
			return nil, fmt.Errorf("bcp gateway: subscribe %s: %w (the gateway's credential must allow it)", s.pattern, err)
		}
	}
	g.wg.Add(2)
	go g.sender()
	go g.sweeper()
	g.announceSubscriptions(time.Now(), false)
	return g, nil
}

// Close disconnects from the bus and closes the state file. Messages not
// yet handed to the bus stay queued for the next Start.
func (g *Gateway) Close() error {
	var err error
	g.closed.Do(func() {
		close(g.stop)
		err = g.conn.Close()
		g.wg.Wait()
		g.absent.Stop()
		if cerr := g.state.close(); err == nil {
			err = cerr
		}
	})
	return err
}

// Done is closed when the gateway's bus connection has ended for good:
// Close, a newer connection that took its clientId over, or a reconnect
// the bus refused for its credential. Err says which.
func (g *Gateway) Done() <-chan struct{} { return g.conn.Done() }

// Err returns why the bus connection ended, or nil while it has not.
func (g *Gateway) Err() error { return g.conn.Err() }

// Audit returns the audit log after sequence number after, oldest first.
func (g *Gateway) Audit(after uint64) ([]AuditRecord, error) { return g.state.auditLog(after) }

// Usage returns the account of the channel controller → reader.
func (g *Gateway) Usage(controller, reader string) (bcp.Usage, error) {
	var u bcp.Usage
	err := g.state.update(time.Now(), func(t *txn) error {
		rec, err := t.budget(controller, reader)
		if err != nil {
			return err
		}
		u = rec.Usage
		if ch := g.controllerChannel(controller, reader); ch != nil {
			u = bcp.RestoreBudget(limitsOf(ch), rec.Usage).Usage()
		}
		return nil
	})
	return u, err
}

// ack is a handler's answer, recorded so that a redelivery gets it again.
type ack struct {
	processed bool
	message   string
}

func accepted(format string, args ...any) ack { return ack{true, fmt.Sprintf(format, args...)} }

// refused builds the ack of a refusal: the code, a colon, the detail.
func refused(code, detail string) ack { return ack{false, code + ": " + detail} }

// handle runs f for a delivery in one transaction, unless the delivery's
// message was handled before, in which case it answers as it did then.
// A storage error is answered with ShouldRetry, so the bus tries again.
func (g *Gateway) handle(d *peer.Delivery, f func(t *txn) (ack, error)) (peer.Result, error) {
	var a ack
	err := g.state.update(time.Now(), func(t *txn) error {
		if prev, err := t.seen(d.MessageID); err != nil || prev != nil {
			if prev != nil {
				a = ack{prev.Processed, prev.Message}
			}
			return err
		}
		var err error
		if a, err = f(t); err != nil {
			return err
		}
		return t.markSeen(d.MessageID, a.processed, a.message)
	})
	if err != nil {
		g.log.Error("bcp gateway: handle message", "topic", d.Topic, "from", d.From, "message_id", d.MessageID, "err", err)
		return peer.Result{ShouldRetry: true, RetryAfter: time.Second, Message: CodeInternal + ": the gateway could not record this step; retrying"}, nil
	}
	g.wake()
	return peer.Result{Processed: a.processed, Message: a.message}, nil
}

// handleEnvelope is handle for what agents and approvers send: a payload
// the strict decoder refuses is malformed before anything reads its type,
// so that a duplicate "type" cannot choose the handler.
func (g *Gateway) handleEnvelope(d *peer.Delivery, f func(t *txn) (ack, error)) (peer.Result, error) {
	return g.handle(d, func(t *txn) (ack, error) {
		if err := bcp.CheckJSON(d.Payload); err != nil {
			return refuse(t, AuditRecord{From: d.From}, CodeMalformed, "payload: "+bcpDetail(err))
		}
		return f(t)
	})
}

// refuse audits a refusal and returns its ack.
func refuse(t *txn, rec AuditRecord, code, detail string) (ack, error) {
	rec.Outcome, rec.Detail = code, detail
	t.onCommit(func(m *metrics) { m.refusals.WithLabelValues(code).Inc() })
	if rec.Event == "" {
		rec.Event = "refusal"
	}
	return refused(code, detail), t.audit(rec)
}

// controllerChannel returns controller's channel to reader, or nil.
func (g *Gateway) controllerChannel(controller, reader string) *bcp.Channel {
	def := g.registry.Definition(controller)
	if def == nil {
		return nil
	}
	return def.Channel(reader, bcp.Controller)
}

// stepDownTaint is the taint of what the Reader says once validated: its
// definition's base taint (unknown reads as high), one level down.
func (g *Gateway) stepDownTaint(reader string) string {
	var t bcp.Taint
	if def := g.registry.Definition(reader); def != nil {
		t = def.BaseTaint
	}
	return t.StepDown().String()
}

func (g *Gateway) wake() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// sender hands queued messages to the bus, each destination topic's in
// order, and the topics independently: a sendMessage returns only once
// every subscriber answered or timed out, so one queue for all would let
// a silent agent hold up everyone's messages by a delivery timeout each.
// A message leaves its queue once the bus has it: routed, or held for an
// absent agent. When the bus cannot be reached the queue waits and tries
// again, so nothing the gateway decided is lost.
func (g *Gateway) sender() {
	defer g.wg.Done()
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		g.startSending()
		select {
		case <-g.stop:
			return
		case <-g.kick:
		case <-retry.C:
		}
	}
}

// startSending starts a goroutine for each topic with queued messages and
// none sending it, and tells those already sending to look again.
func (g *Gateway) startSending() {
	topics, err := g.state.outboxTopics()
	if err != nil {
		g.log.Error("bcp gateway: read outbox", "err", err)
		return
	}
	g.sendingMu.Lock()
	defer g.sendingMu.Unlock()
	for _, topic := range topics {
		if _, busy := g.sending[topic]; busy {
			g.sending[topic] = true
			continue
		}
		g.sending[topic] = false
		g.wg.Add(1)
		go g.sendTopic(topic)
	}
}

// sendTopic sends topic's queue until it is empty (or the bus cannot be
// reached), then stops. A topic the bus refuses for now waits here, as
// long as the bus asks or a retry period, and keeps its place: new
// messages queued meanwhile do not send it again sooner.
func (g *Gateway) sendTopic(topic string) {
	defer g.wg.Done()
	for {
		for {
			sent, wait := g.sendOne(topic)
			if sent {
				continue
			}
			if wait <= 0 || !g.sleep(wait) {
				break
			}
		}
		g.sendingMu.Lock()
		again := g.sending[topic]
		if again {
			g.sending[topic] = false
		} else {
			delete(g.sending, topic)
		}
		g.sendingMu.Unlock()
		if !again {
			return
		}
	}
}

// sleep waits d, or until the gateway closes; false means it closed.
func (g *Gateway) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-g.stop:
		return false
	case <-t.C:
		return true
	}
}

// sendFailed logs that topic's send failed, the first time of a streak
// only.
func (g *Gateway) sendFailed(topic string, err error) {
	g.sendingMu.Lock()
	first := !g.failing[topic]
	g.failing[topic] = true
	g.sendingMu.Unlock()
	if first {
		g.log.Warn("bcp gateway: send failed; will retry until the bus takes it", "topic", topic, "err", err)
	}
}

// sendWorks ends topic's streak of failed sends, logging that it did.
func (g *Gateway) sendWorks(topic string) {
	g.sendingMu.Lock()
	ended := g.failing[topic]
	delete(g.failing, topic)
	g.sendingMu.Unlock()
	if ended {
		g.log.Info("bcp gateway: the bus takes the topic's messages again", "topic", topic)
	}
}

// sendOne sends the oldest message queued for topic. When it sent none
// it says how long to wait before trying again; zero means stop until the
// sender wakes the topic.
func (g *Gateway) sendOne(topic string) (sent bool, wait time.Duration) {
	select {
	case <-g.stop:
		return false, 0
	default:
	}
	key, m, ok, err := g.state.nextOutbox(topic)
	if err != nil {
		g.log.Error("bcp gateway: read outbox", "err", err)
		return false, 0
	}
	if !ok {
		return false, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		select {
		case <-g.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := g.conn.SendMessage(ctx, m.Topic, m.Payload, nil)
	var perr *protocol.Error
	if errors.As(err, &perr) {
		wait = refusedForNow(perr)
	}
	if perr != nil && wait == 0 {
		// The bus refused the message (the gateway's grant lacks the
		// topic, say): it will refuse it again, and retrying would block
		// every later message of the topic. The audit log keeps it.
		if !isEventTopic(m.Topic) {
			g.log.Error("bcp gateway: the bus refused a message, dropped", "topic", m.Topic, "err", err)
		} else {
			g.eventsRefused.Do(func() {
				g.log.Warn("bcp gateway: the bus refuses the gateway's events for operators, dropped (said once); grant the gateway publish "+protocol.TopicBCPEvents+".* for the console's BCP page",
					"topic", m.Topic, "err", err)
			})
		}
		res, err = &protocol.SendMessageResult{Reason: perr.Error()}, nil
	}
	if err != nil {
		g.sendFailed(topic, err)
		return false, wait
	}
	g.sendWorks(topic)
	delivered := res.Success || res.Held
	if !delivered {
		// Nobody subscribes and the bus does not hold the topic: retrying
		// would block every later message. The audit log keeps it.
		if g.undeliverable(m, res.Reason) {
			_ = g.state.update(time.Now(), func(t *txn) error {
				return t.audit(AuditRecord{Event: "undeliverable", Outcome: res.Reason, Detail: m.Topic})
			})
		}
		if m.Outcome != nil && m.Outcome.Undeliverable != nil {
			// The follow-up says why; its detail is filled in here, as
			// only the bus's answer knows the reason.
			m.Outcome.Undeliverable.Payload = withReason(m.Outcome.Undeliverable.Payload, res.Reason)
		}
		if m.Outcome != nil && m.Outcome.Audit != nil {
			m.Outcome.Audit.Detail += ": " + res.Reason
		}
	}
	if err := g.state.finishOutbox(time.Now(), key, &m, res, delivered); err != nil {
		g.log.Error("bcp gateway: dequeue sent message", "topic", m.Topic, "err", err)
		return false, 0
	}
	if m.Outcome != nil {
		// The follow-up may be queued for another topic, whose queue no
		// goroutine may be sending: without a wake it would wait for the
		// next retry tick.
		g.wake()
	}
	return true, 0
}

// absentApproverEvery is how often the log counts the approval messages
// an approver with no client subscribed missed, while it stays away.
const absentApproverEvery = time.Minute

// undeliverable logs a message nobody took, and reports whether the
// audit log records it. An approver away misses every approval message:
// the log says so once, then counts them (absent); the audit log records
// each request it missed, not the closing notices that follow.
func (g *Gateway) undeliverable(m outMessage, reason string) (audit bool) {
	if isEventTopic(m.Topic) {
		// Nobody need subscribe: the bus's console reads the events as
		// the bus routes them.
		return false
	}
	approver, ok := strings.CutPrefix(m.Topic, TopicApprovalRequested+".")
	if !ok || !g.approvers[approver] {
		g.log.Warn("bcp gateway: message undeliverable, dropped", "topic", m.Topic, "reason", reason)
		return true
	}
	if g.absent.Add(approver) {
		g.log.Warn(fmt.Sprintf("bcp gateway: approver not connected; its approval messages are dropped (counted every %v while it stays away)", absentApproverEvery),
			"approver", approver, "topic", m.Topic, "reason", reason)
	}
	var p struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(m.Payload, &p) != nil || p.Type != TypeApprovalClosed
}

// retryPeriod is how long a topic the bus refused for now waits before
// its message is sent again, unless the bus says how long.
const retryPeriod = time.Second

// maxRetryAfter bounds the wait a bus may ask for with retry_after_ms.
const maxRetryAfter = time.Minute

// transientLimits are the limits named in a -32011 to sendMessage that
// free up as stored work drains. Any other limit (a future one included)
// would refuse the message again, forever.
var transientLimits = map[string]bool{
	"max_pending": true, "max_pending_per_identity": true,
	"max_stored_bytes": true, "max_stored_bytes_per_identity": true,
}

// refusedForNow returns how long to wait before sending again a message
// the bus refused for now: too many requests on the connection (the
// topics' queues send at once), a draining bus, a full pending limit, or
// the publish rate (as long as the bus's retry_after_ms says). The message
// then stays queued, as when the bus cannot be reached: dropping it would
// lose what the gateway decided. Zero means the bus would refuse it again
// (a topic too long, a grant without it, ...).
func refusedForNow(e *protocol.Error) time.Duration {
	switch e.Code {
	case protocol.CodeTooManyRequests, protocol.CodeShuttingDown:
		return retryPeriod
	case protocol.CodeLimitReached:
		// The bus names the limit first: "limit reached: max_pending: ...".
		rest, _ := strings.CutPrefix(e.Message, protocol.ErrLimitReached.Message+": ")
		limit, _, _ := strings.Cut(rest, ":")
		if transientLimits[limit] {
			return retryPeriod
		}
	case protocol.CodeRateLimited:
		return retryAfter(e.Data)
	}
	return 0
}

// retryAfter is the wait a -32012's data asks for, retryPeriod when it
// says none, bounded by maxRetryAfter.
func retryAfter(data any) time.Duration {
	var d struct {
		RetryAfterMS float64 `json:"retry_after_ms"`
	}
	raw, ok := data.(json.RawMessage)
	if !ok || json.Unmarshal(raw, &d) != nil || !(d.RetryAfterMS > 0) {
		return retryPeriod
	}
	if d.RetryAfterMS >= float64(maxRetryAfter/time.Millisecond) {
		return maxRetryAfter
	}
	return time.Duration(d.RetryAfterMS * float64(time.Millisecond))
}

// withReason appends the bus's reason to the detail of a queued
// bcp_validation_result; any other payload is returned as is.
func withReason(payload json.RawMessage, reason string) json.RawMessage {
	var vr ValidationResult
	if reason == "" || json.Unmarshal(payload, &vr) != nil || vr.Type != TypeValidationResult {
		return payload
	}
	vr.Detail += ": " + reason
	data, err := json.Marshal(vr)
	if err != nil {
		return payload
	}
	return data
}

// sweeper fails queries whose time ran out, and forgets old message ids.
func (g *Gateway) sweeper() {
	defer g.wg.Done()
	tick := time.NewTicker(g.opts.sweepInterval)
	defer tick.Stop()
	server := g.conn.ServerID()
	for {
		select {
		case <-g.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		// Back on the bus after a drop: every Reader hears its
		// subscriptions again (the bus holds them for one that is away).
		if id := g.conn.ServerID(); id != server {
			if server = id; id != "" {
				g.announceSubscriptions(now, true)
			}
		}
		pending, err := g.state.pendingQueries()
		if err != nil {
			g.log.Error("bcp gateway: list pending queries", "err", err)
			continue
		}
		for _, q := range pending {
			if now.Before(q.ExpiresAt) {
				continue
			}
			err := g.state.update(now, func(t *txn) error {
				q, err := t.query(q.ID)
				if err != nil || q == nil || q.State != statePending {
					return err
				}
				return g.fail(t, q, CodeExpired)
			})
			if err != nil {
				g.log.Error("bcp gateway: expire query", "query_id", q.ID, "err", err)
			}
		}
		expired, err := g.state.expiredApprovals(now)
		if err != nil {
			g.log.Error("bcp gateway: list expired approvals", "err", err)
		}
		for _, id := range expired {
			err := g.state.update(now, func(t *txn) error {
				a, err := t.approval(id)
				if err != nil || a == nil || a.State != approvalPending {
					return err
				}
				return g.expireApproval(t, a)
			})
			if err != nil {
				g.log.Error("bcp gateway: expire approval", "approval_id", id, "err", err)
			}
		}
		g.wake()
		if err := g.state.pruneSeen(now); err != nil {
			g.log.Error("bcp gateway: prune handled message ids", "err", err)
		}
	}
}

// fail closes a pending query with code and tells the Controller.
func (g *Gateway) fail(t *txn, q *queryRecord, code string) error {
	q.State, q.Code = stateFailed, code
	if err := t.putQuery(q); err != nil {
		return err
	}
	if err := t.send(peer.AgentTopic(q.Controller), QueryFailed{Type: TypeQueryFailed, QueryID: q.ID, Code: code}); err != nil {
		return err
	}
	return t.audit(AuditRecord{Event: "failure", Controller: q.Controller, Reader: q.Reader, QueryID: q.ID, Category: q.Spec.Category, DeclaredBits: q.Cost, Outcome: code})
}
