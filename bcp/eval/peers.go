package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/bcp/agent"
	"github.com/bub-bus/bub/bcp/gateway"
	"github.com/bub-bus/bub/peer"
)

// outcomeWait bounds the wait for one query's outcome, so that a stuck
// run fails the harness with the query named instead of hanging it.
const outcomeWait = 30 * time.Second

// dial connects name with its token, subscribing handler to pattern
// when one is given; without one the connection is publish-only unless
// the caller subscribes.
func (tb *testbed) dial(ctx context.Context, name, pattern string, handler peer.Handler) (*peer.Conn, error) {
	conn, err := peer.Dial(ctx, tb.url, &peer.Options{ClientID: name, Token: tb.tokens[name], Logger: slog.New(slog.DiscardHandler),
		PublishOnly: name == baselineController, NoReconnect: true})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", name, err)
	}
	if pattern != "" {
		if err := conn.Subscribe(ctx, pattern, handler, nil); err != nil {
			conn.Close()
			return nil, fmt.Errorf("%s: subscribe %s: %w", name, pattern, err)
		}
	}
	return conn, nil
}

// outcome is what the gateway sent a Controller about one query.
type outcome struct {
	delivery *gateway.ResponseDelivery
	failed   string
	at       time.Time
	arrival  int
}

// controllerPeer is a suite's Controller connection: the asker of its
// BCP runs.
type controllerPeer struct {
	sdk    *agent.Controller
	reader string

	// mu guards the fields below, which the handler fills.
	mu       sync.Mutex
	outcomes map[string]outcome
	waiters  map[string]chan struct{}
	arrivals int
}

func newControllerPeer(reader string) *controllerPeer {
	return &controllerPeer{reader: reader, outcomes: map[string]outcome{}, waiters: map[string]chan struct{}{}}
}

func (p *controllerPeer) handler() agent.ControllerHandler {
	return agent.ControllerHandler{
		OnDelivery: func(_ context.Context, d *gateway.ResponseDelivery) error {
			p.arrive(d.QueryID, outcome{delivery: d})
			return nil
		},
		OnFailure: func(_ context.Context, f *gateway.QueryFailed) error {
			p.arrive(f.QueryID, outcome{failed: f.Code})
			return nil
		},
	}
}

// arrive records an outcome; a redelivery of one already recorded (the
// bus delivers at least once) changes nothing.
func (p *controllerPeer) arrive(id string, o outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.outcomes[id]; ok {
		return
	}
	o.at, o.arrival = time.Now(), p.arrivals
	p.arrivals++
	p.outcomes[id] = o
	if ch, ok := p.waiters[id]; ok {
		close(ch)
		delete(p.waiters, id)
	}
}

func (p *controllerPeer) wait(ctx context.Context, id string) (outcome, error) {
	p.mu.Lock()
	if o, ok := p.outcomes[id]; ok {
		p.mu.Unlock()
		return o, nil
	}
	ch := make(chan struct{})
	p.waiters[id] = ch
	p.mu.Unlock()
	t := time.NewTimer(outcomeWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		return outcome{}, fmt.Errorf("query %s to %s: no delivery or failure within %v (%d outcomes arrived in all)", id, p.reader, outcomeWait, p.arrivals)
	case <-ctx.Done():
		return outcome{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outcomes[id], nil
}

func (p *controllerPeer) ask(c *Ctx, qs []query) ([]reply, error) {
	ctx := c.ctx
	out := make([]reply, len(qs))
	ids := make([]string, len(qs))
	sent := make([]time.Time, len(qs))
	for i, q := range qs {
		sent[i] = time.Now()
		var err error
		if q.spec.Category == bcp.Summary {
			ids[i], err = p.sdk.Escalate(ctx, p.reader, q.spec, q.justification)
		} else {
			ids[i], err = p.sdk.Query(ctx, p.reader, q.spec)
		}
		var refused *agent.RefusedError
		if errors.As(err, &refused) {
			out[i] = reply{Failed: refused.Code, Refused: true}
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	for i, id := range ids {
		if id == "" {
			continue
		}
		o, err := p.wait(ctx, id)
		if err != nil {
			return nil, err
		}
		out[i].Latency, out[i].Arrival = o.at.Sub(sent[i]), o.arrival
		if o.failed != "" {
			out[i].Failed = o.failed
			continue
		}
		d := o.delivery
		a, err := answerOf(d.Response)
		if err != nil {
			return nil, err
		}
		out[i].Answer, out[i].Raw, out[i].Anomalies, out[i].Bits = a, d.Response, d.Anomalies, d.BandwidthBits
	}
	return out, nil
}

// approverPeer is the scripted human: it approves every escalation
// (each names the Controller's own justification) and decides each
// summary by the run's policy (decideSummary).
type approverPeer struct {
	conn *peer.Conn
	// mu guards the fields below.
	mu       sync.Mutex
	policy   map[string]string          // controller → the current run's policy
	requests map[string]map[string]bool // controller → approval ids heard this run
	// decisions are the run's decisions per controller: approve,
	// reject, edit.
	decisions map[string]map[string]int
	errs      []string
	wg        sync.WaitGroup
}

func (p *approverPeer) setRun(controller, policy string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.policy[controller], p.requests[controller], p.decisions[controller] = policy, map[string]bool{}, map[string]int{}
}

// decided returns the run's decisions for controller.
func (p *approverPeer) decided(controller string) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.decisions[controller])
}

func (p *approverPeer) requested(controller string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.requests[controller])
}

func (p *approverPeer) handle(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	if d.From != gatewayID {
		return peer.Result{Message: "not from the BCP gateway"}, nil
	}
	if d.Type() != gateway.TypeApprovalRequest {
		return peer.Result{Processed: true}, nil
	}
	var req gateway.ApprovalRequest
	if err := d.Decode(&req); err != nil {
		return peer.Result{}, err
	}
	p.mu.Lock()
	seen := p.requests[req.Controller][req.ApprovalID]
	if p.requests[req.Controller] != nil {
		p.requests[req.Controller][req.ApprovalID] = true
	}
	policy := p.policy[req.Controller]
	p.mu.Unlock()
	if seen {
		// The bus delivers at least once: a request heard again was
		// decided already.
		return peer.Result{Processed: true}, nil
	}
	dec := map[string]string{"type": gateway.TypeApprovalDecision, "approval_id": req.ApprovalID, "decision": "approve"}
	if req.Kind == gateway.KindSummary {
		decision, edited := decideSummary(policy, req.Summary, req.Anomalies)
		dec["decision"] = decision
		if decision == "edit" {
			dec["summary"], dec["reason"] = edited, "cut the flagged words"
		}
		if decision == "reject" {
			dec["reason"] = "flagged by the gateway"
		}
	}
	p.mu.Lock()
	if p.decisions[req.Controller] != nil {
		p.decisions[req.Controller][dec["decision"]]++
	}
	p.mu.Unlock()
	// Off the handler: the gateway's next message to this approver
	// waits for this one's ack.
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		res, err := p.conn.SendMessage(context.Background(), gateway.TopicApproval, dec, nil)
		p.mu.Lock()
		defer p.mu.Unlock()
		switch {
		case err != nil:
			p.errs = append(p.errs, err.Error())
		case len(res.Acks) == 0 || !res.Acks[0].Processed:
			p.errs = append(p.errs, fmt.Sprintf("decision on %s refused: %+v", req.ApprovalID, res.Acks))
		}
	}()
	return peer.Result{Processed: true}, nil
}

// baselineRun is what the baseline Reader reads in one run.
type baselineRun struct {
	facts map[string]string
	text  string
}

// baselinePeer is the Reader of the no-BCP baseline: asked a question,
// it answers in free text, the facts the Controller wanted and the
// documents it read, injections and all, as a model's raw output would
// carry them.
type baselinePeer struct {
	// mu guards runs.
	mu   sync.Mutex
	runs map[string]*baselineRun // suite → current run
}

type baselineRequest struct {
	Type  string    `json:"type"` // baseline_read
	Suite string    `json:"suite"`
	Spec  *bcp.Spec `json:"spec"`
}

func (p *baselinePeer) set(suite string, r *baselineRun) {
	p.mu.Lock()
	p.runs[suite] = r
	p.mu.Unlock()
}

func (p *baselinePeer) handle(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	var req baselineRequest
	if err := d.Decode(&req); err != nil {
		return peer.Result{}, err
	}
	p.mu.Lock()
	r := p.runs[req.Suite]
	p.mu.Unlock()
	if r == nil || req.Spec == nil {
		return peer.Result{Message: "no run for suite " + req.Suite}, nil
	}
	var b strings.Builder
	for _, k := range specKeys(req.Spec) {
		v := orUnknown(r.facts[k])
		if k == "summary" {
			// Free text has no length limit: the "summary" is the
			// documents themselves, as a model asked to copy them
			// would give them.
			v = strings.Join(strings.Fields(r.text), " ")
		}
		fmt.Fprintf(&b, "%s: %s\n", k, v)
	}
	b.WriteString("document: " + r.text)
	return peer.Result{Processed: true, Message: b.String()}, nil
}

// baselineAsker is the Controller without BCP: it sends the question to
// the Reader over the bus, takes the answers from the free text without
// validation, and does what the text tells it, as a model that reads
// injected text does.
type baselineAsker struct {
	conn  *peer.Conn
	suite *Suite
	// bits are the bits of free text that crossed: 8 per byte.
	bits float64
}

// toolCall matches name(key="value", ...) in free text.
var (
	toolCall = regexp.MustCompile(`([a-z_]+)\(((?:\s*[a-z_]+="[^"]*"\s*,?)*)\)`)
	toolArg  = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
)

func (b *baselineAsker) ask(c *Ctx, qs []query) ([]reply, error) {
	out := make([]reply, len(qs))
	for i, q := range qs {
		res, err := b.conn.SendMessage(c.ctx, baselineTopic, baselineRequest{Type: "baseline_read", Suite: b.suite.Name, Spec: q.spec}, nil)
		if err != nil {
			return nil, err
		}
		if len(res.Acks) == 0 || !res.Acks[0].Processed {
			return nil, fmt.Errorf("baseline reader did not answer: %+v", res)
		}
		text := res.Acks[0].Message
		b.bits += 8 * float64(len(text))
		a := Answer{}
		for _, line := range strings.Split(text, "\n") {
			if k, v, ok := strings.Cut(line, ": "); ok && k != "document" {
				a[k] = v
			}
		}
		for _, m := range toolCall.FindAllStringSubmatch(text, -1) {
			if _, ok := b.suite.Tools[m[1]]; !ok {
				continue
			}
			callArgs := map[string]string{}
			for _, kv := range toolArg.FindAllStringSubmatch(m[2], -1) {
				callArgs[kv[1]] = kv[2]
			}
			c.Do(m[1], callArgs)
		}
		raw, _ := json.Marshal(a)
		out[i] = reply{Answer: a, Raw: raw}
	}
	return out, nil
}
