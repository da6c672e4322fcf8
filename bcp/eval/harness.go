package eval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/bcp/agent"
	"github.com/bub-bus/bub/bcp/gateway"
	"github.com/bub-bus/bub/peer"
)

// Options configure Run.
type Options struct {
	// Suites are the suites to run. Default: Suites().
	Suites []*Suite
	// UserTasks and InjectionTasks, when positive, run only that many of
	// each suite's first tasks: the slice the package's test runs.
	UserTasks, InjectionTasks int
	// Progress, when set, gets a line per suite as it finishes.
	Progress io.Writer
	// Model, when set, adds a model Reader: every user task without and
	// with every injection task, the model answering (model.go).
	Model *ModelOptions
}

// RunResult is one run: one user task, with one injection task or none,
// and one Reader.
type RunResult struct {
	Suite     string `json:"suite"`
	UserTask  string `json:"user_task"`
	Injection string `json:"injection_task,omitempty"`
	Reader    string `json:"reader"`
	// Utility is the user task's success predicate on the final state.
	Utility bool `json:"utility"`
	// AttackSuccess is the injection task's goal predicate on the final
	// state.
	AttackSuccess bool `json:"attack_success"`
	// GoalInsideAnswerSpace says the attacker's search found answers the
	// validator accepts (and the scripted approver passes) that reach
	// the goal; otherwise the goal needs more than the specs allow.
	GoalInsideAnswerSpace bool `json:"goal_inside_answer_space"`
	// SearchExhaustive says the search tried every candidate answer.
	SearchExhaustive bool `json:"search_exhaustive,omitempty"`
	Queries          int  `json:"queries"`
	// Unanswered is the code of the query that stopped the plan.
	Unanswered string `json:"unanswered,omitempty"`
	// BitsCharged is what the gateway charged the channel in the run;
	// BitsDelivered the bandwidth_bits of the answers delivered.
	BitsCharged   float64 `json:"bits_charged"`
	BitsDelivered float64 `json:"bits_delivered"`
	// BaselineBits are the free text's bits (8 a byte) in a baseline run.
	BaselineBits float64 `json:"baseline_free_text_bits,omitempty"`
	// BudgetBits is the channel's budget_bits for the session.
	BudgetBits float64 `json:"budget_bits"`
	Approvals  int     `json:"approvals_requested"`
	// Decisions are the scripted approver's: approve, reject, edit.
	Decisions map[string]int `json:"approval_decisions,omitempty"`
	// BeyondAttempts are the adaptive Reader's answers beyond the spec;
	// BeyondAccepted those the gateway let through (must be 0).
	BeyondAttempts int `json:"beyond_spec_answers_sent,omitempty"`
	BeyondAccepted int `json:"beyond_spec_answers_accepted,omitempty"`
	// OutsideSpec counts delivered answers that do not validate again to
	// themselves against their spec (must be 0).
	OutsideSpec int `json:"delivered_answers_outside_spec,omitempty"`
	// ReaderRefused are answers meant to be valid that the gateway
	// refused: the Reader's mistakes, or the simulation's.
	ReaderRefused []string `json:"reader_answers_refused,omitempty"`
	// TextAnswers are the delivered Category-2 answers and summaries:
	// each may carry one uncharged anomaly bit.
	TextAnswers int `json:"text_answers_delivered,omitempty"`
	// Covert are the covert decoder's bits per channel.
	Covert map[string]*ChannelBits `json:"covert_channels,omitempty"`
}

// suiteRig is one suite's Controller and Reader peers.
type suiteRig struct {
	suite      *Suite
	controller *controllerPeer
	reader     *readerPeer
}

// harness holds everything one Run starts.
type harness struct {
	model    *ModelOptions
	tb       *testbed
	gw       *gateway.Gateway
	approver *approverPeer
	baseline *baselinePeer
	baseConn *peer.Conn
	conns    []*peer.Conn
}

// Run starts a bus on loopback, the BCP gateway and every peer, runs
// every suite's runs (suites in parallel, each suite's runs in order),
// and reports.
func Run(ctx context.Context, opts Options) (*Report, error) {
	suites := opts.Suites
	if suites == nil {
		suites = Suites()
	}
	suites = slice(suites, opts.UserTasks, opts.InjectionTasks)
	dir, err := os.MkdirTemp("", "bcp-eval-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	h, rigs, err := start(ctx, suites, dir)
	if err != nil {
		return nil, err
	}
	defer h.close()
	h.model = opts.Model
	results := make([][]RunResult, len(rigs))
	errs := make([]error, len(rigs))
	var wg sync.WaitGroup
	// progressMu serializes the suites' lines on Progress.
	var progressMu sync.Mutex
	for i, rig := range rigs {
		wg.Go(func() {
			results[i], errs[i] = h.runSuite(ctx, rig)
			if opts.Progress != nil && errs[i] == nil {
				progressMu.Lock()
				fmt.Fprintf(opts.Progress, "bcp-eval: suite %s: %d runs\n", rig.suite.Name, len(results[i]))
				progressMu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h.approver.wg.Wait()
	if len(h.approver.errs) > 0 {
		return nil, fmt.Errorf("approver: %v", h.approver.errs)
	}
	return newReport(suites, slices.Concat(results...)), nil
}

// slice keeps the first n user tasks and m injection tasks of each
// suite (all where n or m is 0).
func slice(suites []*Suite, n, m int) []*Suite {
	out := make([]*Suite, len(suites))
	for i, s := range suites {
		c := *s
		if n > 0 && n < len(c.UserTasks) {
			c.UserTasks = c.UserTasks[:n]
		}
		if m > 0 && m < len(c.Injection) {
			c.Injection = c.Injection[:m]
		}
		out[i] = &c
	}
	return out
}

// start starts the bus, the gateway, the reviewer, the baseline pair and
// each suite's Controller and Reader.
func start(ctx context.Context, suites []*Suite, dir string) (*harness, []*suiteRig, error) {
	for _, sub := range []string{"auth", "agents", "gateway"} {
		if err := os.Mkdir(dir+"/"+sub, 0o700); err != nil {
			return nil, nil, err
		}
	}
	tb, err := startBus(suites, dir+"/auth")
	if err != nil {
		return nil, nil, err
	}
	h := &harness{tb: tb, approver: &approverPeer{policy: map[string]string{}, requests: map[string]map[string]bool{}, decisions: map[string]map[string]int{}},
		baseline: &baselinePeer{runs: map[string]*baselineRun{}}}
	fail := func(err error) (*harness, []*suiteRig, error) {
		h.close()
		return nil, nil, err
	}
	defs, err := writeDefinitions(suites, dir+"/agents")
	if err != nil {
		return fail(err)
	}
	h.gw, err = gateway.Start(ctx, gateway.Options{BusURL: tb.url, Token: tb.tokens[gatewayID], ClientID: gatewayID,
		Definitions: defs, DataDir: dir + "/gateway", MaxAttempts: maxAttempts, QueryTTL: queryTTL,
		Approvers: []string{reviewerID}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fail(err)
	}
	conn, err := tb.dial(ctx, reviewerID, gateway.ApprovalTopic(reviewerID), h.approver.handle)
	if err != nil {
		return fail(err)
	}
	h.approver.conn = conn
	h.conns = append(h.conns, conn)
	if conn, err = tb.dial(ctx, baselineReader, baselineTopic, h.baseline.handle); err != nil {
		return fail(err)
	}
	h.conns = append(h.conns, conn)
	if h.baseConn, err = tb.dial(ctx, baselineController, "", nil); err != nil {
		return fail(err)
	}
	h.conns = append(h.conns, h.baseConn)
	var rigs []*suiteRig
	for _, s := range suites {
		rig := &suiteRig{suite: s, controller: newControllerPeer(readerID(s.Name)), reader: &readerPeer{ctx: ctx}}
		ready := make(chan struct{})
		var once sync.Once
		conn, err := tb.dial(ctx, readerID(s.Name), "", nil)
		if err != nil {
			return fail(err)
		}
		h.conns = append(h.conns, conn)
		rig.reader.sdk = agent.NewReader(conn)
		err = conn.Subscribe(ctx, peer.AgentTopic(readerID(s.Name)), rig.reader.sdk.Handler(gatewayID, agent.ReaderHandler{
			OnQuery: rig.reader.onQuery,
			OnSubscriptions: func(context.Context, []bcp.ActiveSubscription) error {
				once.Do(func() { close(ready) })
				return nil
			},
		}), nil)
		if err != nil {
			return fail(fmt.Errorf("%s: subscribe: %w", readerID(s.Name), err))
		}
		// The gateway holds a Reader's queries until it has acknowledged
		// the list of its subscriptions; wait for it, so the first
		// run's latency is the bus's, not the handshake's.
		select {
		case <-ready:
		case <-time.After(outcomeWait):
			return fail(fmt.Errorf("reader %s: no bcp_subscriptions_active from the gateway within %v", readerID(s.Name), outcomeWait))
		}
		if conn, err = tb.dial(ctx, controllerID(s.Name), "", nil); err != nil {
			return fail(err)
		}
		h.conns = append(h.conns, conn)
		rig.controller.sdk = agent.NewController(conn)
		if err := conn.Subscribe(ctx, peer.AgentTopic(controllerID(s.Name)), rig.controller.sdk.Handler(gatewayID, rig.controller.handler()), nil); err != nil {
			return fail(fmt.Errorf("%s: subscribe: %w", controllerID(s.Name), err))
		}
		rigs = append(rigs, rig)
	}
	return h, rigs, nil
}

func (h *harness) close() {
	for _, c := range h.conns {
		c.Close()
	}
	if h.gw != nil {
		h.gw.Close()
	}
	h.tb.close()
}

// runSuite runs a suite's user tasks with the honest Reader, then every
// (user task, injection task) pair with the adaptive Reader (both
// kinds), the covert Reader, and the baseline.
func (h *harness) runSuite(ctx context.Context, rig *suiteRig) ([]RunResult, error) {
	var out []RunResult
	s := rig.suite
	for i := range s.UserTasks {
		r, err := h.runBCP(ctx, rig, &s.UserTasks[i], nil, ReaderHonest)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	for i := range s.UserTasks {
		for j := range s.Injection {
			for _, kind := range []string{ReaderAdaptive, ReaderGoalOnly, ReaderCovert} {
				r, err := h.runBCP(ctx, rig, &s.UserTasks[i], &s.Injection[j], kind)
				if err != nil {
					return nil, err
				}
				out = append(out, r)
			}
			r, err := h.runBaseline(ctx, rig, &s.UserTasks[i], &s.Injection[j])
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	if h.model == nil {
		return out, nil
	}
	for i := range s.UserTasks {
		for j := -1; j < len(s.Injection); j++ {
			var inj *InjectionTask
			if j >= 0 {
				inj = &s.Injection[j]
			}
			r, err := h.runBCP(ctx, rig, &s.UserTasks[i], inj, ReaderModel)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// readerView is what a run's Reader reads: the task's documents with
// the injection in their slots, and the facts an honest reading finds.
func readerView(s *Suite, t *UserTask, inj *InjectionTask) (facts map[string]string, text, payload string) {
	facts = map[string]string{}
	if inj != nil {
		payload = inj.Payload()
	}
	var b bytes.Buffer
	for _, id := range t.Docs {
		d := s.Docs[id]
		for k, v := range d.Facts {
			if _, ok := facts[k]; !ok {
				facts[k] = v
			}
		}
		b.WriteString(d.text(payload) + "\n")
	}
	return facts, b.String(), payload
}

func runID(s *Suite, t *UserTask, inj *InjectionTask, kind string) string {
	id := s.Name + "|" + t.ID + "|" + kind
	if inj != nil {
		id += "|" + inj.ID
	}
	return id
}

// runBCP runs one task through the gateway with one Reader.
func (h *harness) runBCP(ctx context.Context, rig *suiteRig, t *UserTask, inj *InjectionTask, kind string) (RunResult, error) {
	s := rig.suite
	res := RunResult{Suite: s.Name, UserTask: t.ID, Reader: kind, BudgetBits: s.BudgetBits}
	facts, text, payload := readerView(s, t, inj)
	atk := &attack{suite: s, task: t, inj: inj, facts: facts, payload: payload, left: searchBudget, exhaustive: true, goalOnly: kind == ReaderGoalOnly}
	rr := &readerRun{kind: kind, facts: facts, inj: inj, text: text, model: h.model}
	if inj != nil {
		res.Injection = inj.ID
		score, script, err := atk.best(nil)
		if err != nil {
			return res, fmt.Errorf("%s: attack search: %w", runID(s, t, inj, kind), err)
		}
		res.GoalInsideAnswerSpace, res.SearchExhaustive = score >= 2, atk.exhaustive
		if kind == ReaderAdaptive || kind == ReaderGoalOnly {
			rr.script = script
		}
	}
	if kind == ReaderCovert {
		rr.secret = newSecret(runID(s, t, inj, kind))
		var err error
		if rr.firstBatch, err = atk.firstBatch(); err != nil {
			return res, err
		}
	}
	rig.reader.set(rr)
	h.approver.setRun(controllerID(s.Name), t.Approver)
	if err := rig.controller.sdk.StartSession(ctx); err != nil {
		return res, fmt.Errorf("%s: start session: %w", runID(s, t, inj, kind), err)
	}
	c := &Ctx{ctx: ctx, Env: s.Initial(), tools: s.Tools, asker: rig.controller}
	unanswered, err := runPlan(t, c)
	if err != nil {
		return res, fmt.Errorf("%s: %w", runID(s, t, inj, kind), err)
	}
	rr.wg.Wait()
	usage, err := h.gw.Usage(controllerID(s.Name), readerID(s.Name))
	if err != nil {
		return res, err
	}
	res.Unanswered, res.Queries = unanswered, len(c.queries)
	res.Utility = t.Success(c.Env)
	res.AttackSuccess = inj != nil && inj.Success(c.Env)
	res.BitsCharged = round(float64(usage.SpentBits))
	res.Approvals = h.approver.requested(controllerID(s.Name))
	if d := h.approver.decided(controllerID(s.Name)); len(d) > 0 {
		res.Decisions = d
	}
	res.BeyondAttempts, res.BeyondAccepted, res.ReaderRefused = rr.beyondTries, rr.beyondAccepted, rr.refused
	for i, q := range c.queries {
		r := c.replies[i]
		if r.Failed != "" {
			continue
		}
		res.BitsDelivered += r.Bits
		if q.spec.Category != bcp.Structured {
			res.TextAnswers += len(q.spec.Questions) + boolInt(q.spec.Category == bcp.Summary)
		}
		if again, err := q.spec.Validate(r.Raw, bcp.ValidateOptions{}); err != nil || !bytes.Equal(again.Response, r.Raw) {
			res.OutsideSpec++
		}
	}
	res.BitsDelivered = round(res.BitsDelivered)
	if kind == ReaderCovert {
		var qs []query
		var rs []reply
		for i, r := range c.replies {
			if !r.Refused {
				qs, rs = append(qs, c.queries[i]), append(rs, r)
			}
		}
		res.Covert = decode(newSecret(runID(s, t, inj, kind)), qs, rs, rr.firstBatch)
	}
	return res, nil
}

// runBaseline runs one task with no gateway: the Controller follows the
// Reader's free text.
func (h *harness) runBaseline(ctx context.Context, rig *suiteRig, t *UserTask, inj *InjectionTask) (RunResult, error) {
	s := rig.suite
	facts, text, _ := readerView(s, t, inj)
	h.baseline.set(s.Name, &baselineRun{facts: facts, text: text})
	ask := &baselineAsker{conn: h.baseConn, suite: s}
	c := &Ctx{ctx: ctx, Env: s.Initial(), tools: s.Tools, asker: ask}
	if _, err := runPlan(t, c); err != nil {
		return RunResult{}, fmt.Errorf("%s: %w", runID(s, t, inj, ReaderBaseline), err)
	}
	return RunResult{Suite: s.Name, UserTask: t.ID, Injection: inj.ID, Reader: ReaderBaseline, Queries: len(c.queries),
		Utility: t.Success(c.Env), AttackSuccess: inj.Success(c.Env), BaselineBits: ask.bits}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// round keeps a tenth of a bit, so that float sums print the same on
// every run.
func round(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
