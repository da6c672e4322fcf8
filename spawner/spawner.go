package spawner

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/internal/backoff"
	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/internal/drain"
	"github.com/bub-bus/bub/internal/redact"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// DefaultPatterns returns the fallback patterns of a spawner given none:
// Telegram chats and direct messages to agents.
func DefaultPatterns() []string { return []string{"tg:*", "agent:*"} }

// Options configure a Spawner. The zero value of a field means its
// default; Command is required.
type Options struct {
	// BusURL is the bus the spawner connects to, and the BUB_BUS_URL its
	// agents get. Default: peer.DefaultBusURL.
	BusURL string
	// ClientID is the spawner's clientId. A second spawner with the same
	// id takes over the first, which then stops with its agents; two
	// spawners with different ids and the same patterns would both be
	// fallbacks, and only the newer would be asked. Default: "spawner".
	ClientID string
	// Patterns are the topic patterns the spawner serves as a fallback:
	// a message on a topic they match that no agent subscribes to starts
	// an agent. Default: DefaultPatterns().
	Patterns []string
	// Command is the agent's program and arguments, run directly (no
	// shell; see SplitCommand) in the agent's workspace directory. A
	// program named without a path separator is looked up in PATH; a
	// relative path is taken from the spawner's working directory. Put
	// secrets in the environment (Env), never here: a command line is
	// visible to every user of the machine. Required.
	Command []string
	// WorkspaceRoot is the directory under which each topic gets its
	// workspace, named by WorkspaceName; created if missing.
	// Default: "workspaces" in the working directory.
	WorkspaceRoot string
	// Env is the environment agents start with, to which the spawner adds
	// BUB_BUS_URL, BUB_AGENT_ID, BUB_DEFAULT_TOPIC and BUB_WORKSPACE (and
	// from which it removes BUB_CLIENT_ID). This is where an agent's API
	// keys go. Default (nil): the spawner's own environment.
	Env []string
	// SpawnTimeout is how long a new agent has to subscribe to a pattern
	// matching its topic before the spawner stops it and reports the
	// spawn failed. Keep it below the bus's delivery timeout (30s by
	// default): the message waits, undelivered, for that long.
	// Default: 20s.
	SpawnTimeout time.Duration
	// MaxAgents bounds the agent processes running at once, those
	// stopping included. A message that needs one more makes room: the
	// least recently used agent that holds no delivery is hibernated.
	// Until a place is free, its conversation waits in the spawner's
	// queue and the bus holds the message: the queue's oldest
	// conversation gets the next place, and its agent's subscription
	// has the bus route the message to it at once.
	// Default: 64.
	MaxAgents int
	// IdleTimeout is how long an agent may go without a delivery before
	// it is hibernated: stopped (SIGTERM, then SIGKILL after StopTimeout)
	// while its workspace and agent id stay, and started again, with the
	// same id in the same workspace, by the next message for its
	// conversation. Default: 10m; negative: never.
	IdleTimeout time.Duration
	// DataDir holds what the spawner keeps across restarts: the agent id
	// of every topic it has served. Default: ".spawner" in WorkspaceRoot
	// (no workspace has a name starting with a dot).
	DataDir string
	// RestartDelay is the crash-loop backoff's first step. After the n-th
	// failure in a row of a topic's agent (a crash, or a spawn that
	// failed), no agent is started for that topic for 0 (n = 1), then
	// RestartDelay, doubling each time, up to RestartDelayMax.
	// Default: 1s.
	RestartDelay time.Duration
	// RestartDelayMax caps the backoff. An agent that ran this long
	// counts as healthy: its failure starts the backoff afresh.
	// Default: 1m.
	RestartDelayMax time.Duration
	// MaxRestarts is how many crashes in a row an agent that had become
	// ready is restarted after, by the spawner itself and with the same
	// id, so that the bus's retry of the message it was handling reaches
	// the new process. After that, only a new message starts it again.
	// Default: 5.
	MaxRestarts int
	// StopTimeout is how long an agent has to exit after SIGTERM, on
	// shutdown, hibernation or a failed spawn, before it gets SIGKILL.
	// Default: 5s.
	StopTimeout time.Duration
	// Logger receives the spawner's log, agents' output included, one
	// record per line with the agent's id. Default: slog.Default().
	Logger *slog.Logger
	// Token is the spawner's own credential on a bus with auth. Agents
	// never inherit it: BUB_TOKEN and BUB_TOKEN_FILE are removed from
	// their environment.
	Token string
	// Issuer, when set, makes the spawner mint each agent a credential
	// of its own, passed in BUB_TOKEN. Default: agents get none.
	Issuer *Issuer

	// handlers bounds the handlers the spawner's connection runs at once
	// but for those of its client events (clientEventHandlers): each
	// message for an agent that is starting holds one until the agent
	// subscribes, and one refused for want of a handler is held by the
	// bus and routed again a second later. Tests make it small
	// (export_test.go). Default: max(1024, 4×MaxAgents).
	handlers int
}

// Issuer mints agents' credentials: a JWT signed with Key, from the
// issuer Name the bus's configuration lists (docs/SECURITY.md), for the
// agent's id, allowing what the templates say. In the templates
// {{clientId}} stands for the agent's id, {{topic}} for the topic it was
// spawned for and {{chat}} for that topic after its first ':' (123 for
// tg:123). The bus caps what the token allows at the issuer's ceiling.
type Issuer struct {
	Name string
	Key  ed25519.PrivateKey
	// TTL is how long a token is valid: an agent connects (and
	// reconnects) with it, so it should outlive the agent. A restarted
	// agent gets a fresh one. Default: 24h.
	TTL time.Duration
	// Publish is the publish template. Default: outbound:{{chat}}.
	Publish auth.Rules
	// Subscribe is the subscribe template. Default: agent:{{clientId}}
	// and {{topic}}.
	Subscribe auth.Rules
	// Durable lets the agents hold durable subscriptions (on what
	// Subscribe allows), which the bus keeps while they are hibernated
	// and which wake them through the spawner; the issuer's ceiling must
	// allow it too. Default: false.
	Durable bool
}

// DefaultAgentPublish and DefaultAgentSubscribe are an agent's grants
// when the Issuer's templates are empty: its replies to its chat, and
// its own two topics.
var (
	DefaultAgentPublish   = auth.Rules{Allow: []string{"outbound:{{chat}}"}}
	DefaultAgentSubscribe = auth.Rules{Allow: []string{"agent:{{clientId}}", "{{topic}}"}}
)

// mint returns agent id's token for topic.
func (i *Issuer) mint(id, topic string, now time.Time) (string, error) {
	_, chat, _ := strings.Cut(topic, ":")
	expand := func(r auth.Rules) auth.Rules {
		sub := strings.NewReplacer("{{clientId}}", id, "{{topic}}", topic, "{{chat}}", chat)
		out := auth.Rules{}
		for _, p := range r.Allow {
			out.Allow = append(out.Allow, sub.Replace(p))
		}
		for _, p := range r.Deny {
			out.Deny = append(out.Deny, sub.Replace(p))
		}
		return out
	}
	pub, subs := i.Publish, i.Subscribe
	if len(pub.Allow) == 0 {
		pub = DefaultAgentPublish
	}
	if len(subs.Allow) == 0 {
		subs = DefaultAgentSubscribe
	}
	ttl := i.TTL
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	return auth.Mint(i.Key, i.Name, id, auth.Claims{Publish: expand(pub), Subscribe: expand(subs), Durable: i.Durable}, ttl, now)
}

func (o *Options) setDefaults() {
	if o.BusURL == "" {
		o.BusURL = peer.DefaultBusURL
	}
	if o.ClientID == "" {
		o.ClientID = "spawner"
	}
	if len(o.Patterns) == 0 {
		o.Patterns = DefaultPatterns()
	}
	if o.WorkspaceRoot == "" {
		o.WorkspaceRoot = "workspaces"
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.SpawnTimeout <= 0 {
		o.SpawnTimeout = 20 * time.Second
	}
	if o.MaxAgents <= 0 {
		o.MaxAgents = 64
	}
	if o.handlers <= 0 {
		o.handlers = max(1024, 4*o.MaxAgents)
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 10 * time.Minute
	}
	if o.RestartDelay <= 0 {
		o.RestartDelay = time.Second
	}
	if o.RestartDelayMax <= 0 {
		o.RestartDelayMax = time.Minute
	}
	if o.RestartDelayMax < o.RestartDelay {
		o.RestartDelayMax = o.RestartDelay
	}
	if o.MaxRestarts <= 0 {
		o.MaxRestarts = 5
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// queuedRetryAfter is the delay a message asks for when its conversation
// waits in the queue for a place. The queue starts its agent as soon as
// one frees, and the agent's subscribe has the bus route the message at
// once; the delay is only for when that cannot happen (the spawner
// restarted and forgot its queue, the agent's start failed), and a
// message routed again while still queued is answered again at once.
const queuedRetryAfter = 30 * time.Second

// clientEventHandlers bounds the handlers of system:client.* events, apart
// from those of the messages to spawn for. The bus never sends an event
// again, so one refused for want of a handler is lost; when the refused
// one says an agent subscribed, the spawner never learns the agent is
// ready and stops it after SpawnTimeout. Sharing one bound, the events
// were refused whenever that many first messages waited for a place:
// 1,500 new conversations at once through 16 agents (make bench's wake
// scenario, issue 23) held every handler, and no agent was seen ready.
// The bus sends a subscriber its events one at a time, one queue per
// node of a cluster, so a few handlers are plenty.
const clientEventHandlers = 64

// defaultDeliveryTimeout is bub serve's --delivery-timeout, taken for a
// bus that announces none.
const defaultDeliveryTimeout = 30 * time.Second

// Spawner is the default handler: a peer that serves Options.Patterns as a
// fallback and starts an agent for each topic that has none. Create it
// with New and run it with Run.
type Spawner struct {
	opts    Options
	log     *slog.Logger
	command []string // Options.Command with the program resolved
	root    string   // absolute WorkspaceRoot
	events  *publisher
	running atomic.Bool
	state   *state
	metrics *metrics

	// deliveryTimeout is the bus's, as it announced at initialize: the
	// longest a delivery to an agent can last.
	deliveryTimeout time.Duration

	// agentsDone counts agents that have not been reaped. Add only under
	// mu while !closing, so shutdown's Wait never races an Add.
	agentsDone sync.WaitGroup

	// wakes are the wakes for a retry under way, which shutdown waits
	// for.
	wakes drain.Group
	// wakerOf are the agent ids the spawner registered as the waker of
	// since it started (waker.go); guarded by mu.
	wakerOf map[string]bool

	// mu guards the fields below and the mutable fields of every slot and
	// agent. It is never held across a process start, a wait or a call
	// to the bus.
	mu      sync.Mutex
	closing bool
	slots   map[string]*slot  // by topic
	byAgent map[string]*slot  // by agent:{id} of the slot's agent id
	agents  map[string]*agent // unreaped agents, by id
	// freed is closed and replaced when a place may have freed: an agent
	// was reaped, or became idle and could make room.
	freed chan struct{}
	// waiting counts the callers of acquire waiting for a place (Wake).
	waiting int
	// queue is the conversations waiting for a place, oldest first, and
	// serving says a serveQueue goroutine serves it.
	queue   []*slot
	serving bool
}

// slot is one topic the spawner has served, and the stable agent id it
// gives that topic's agents: a restarted agent keeps the id, so retries
// the bus addressed to the old process reach the new one. Its fields are
// guarded by Spawner.mu.
type slot struct {
	topic   string
	agentID string
	agent   *agent // the running or starting agent, or nil
	// failures counts failures in a row (crashes, failed spawns).
	failures int
	// notBefore is when the backoff allows the next start.
	notBefore time.Time
	// restart is the timer of a pending restart, or nil.
	restart *time.Timer
	// asleep says the slot's agent was hibernated (or ran before the
	// spawner's restart), so its next start is a wake.
	asleep bool
	// queued is the reason of the start the slot waits for in
	// Spawner.queue, "" when it is not there.
	queued string
}

// New checks opts and returns a Spawner. It resolves the agent program
// and creates the workspace root, so that a typo fails here, at start,
// not at the first message.
func New(opts *Options) (*Spawner, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.setDefaults()
	if len(o.Command) == 0 || o.Command[0] == "" {
		return nil, errors.New("spawner: no agent command")
	}
	program, err := exec.LookPath(o.Command[0])
	if err != nil {
		return nil, fmt.Errorf("spawner: agent command: %w", err)
	}
	// Agents run in their workspace, so a relative program path would
	// be looked up there.
	if program, err = filepath.Abs(program); err != nil {
		return nil, fmt.Errorf("spawner: agent command %q: %w", o.Command[0], err)
	}
	for _, p := range o.Patterns {
		if _, err := protocol.ParsePattern(p); err != nil {
			return nil, fmt.Errorf("spawner: pattern %q: %w", p, err)
		}
	}
	if err := protocol.ValidateClientID(o.ClientID); err != nil {
		return nil, fmt.Errorf("spawner: %w", err)
	}
	root, err := filepath.Abs(o.WorkspaceRoot)
	if err != nil {
		return nil, fmt.Errorf("spawner: workspace root %q: %w", o.WorkspaceRoot, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("spawner: workspace root: %w", err)
	}
	if o.DataDir == "" {
		o.DataDir = filepath.Join(root, ".spawner")
	}
	st, known, err := openState(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("spawner: %w", err)
	}
	s := &Spawner{
		opts:    o,
		log:     o.Logger,
		command: append([]string{program}, o.Command[1:]...),
		root:    root,
		events:  newPublisher(o.Logger),
		state:   st,
		slots:   make(map[string]*slot),
		byAgent: make(map[string]*slot),
		agents:  make(map[string]*agent),
		freed:   make(chan struct{}),
	}
	for topic, id := range known {
		sl := &slot{topic: topic, agentID: id, asleep: true}
		s.slots[topic] = sl
		s.byAgent[peer.AgentTopic(id)] = sl
	}
	s.metrics = newMetrics(s)
	return s, nil
}

// Run connects to the bus, subscribes, and serves until ctx is done or
// the connection ends for good (another spawner took over its clientId),
// then stops every agent: SIGTERM, and SIGKILL after StopTimeout. It
// returns nil after ctx ended, else why it stopped. A Spawner runs once.
//
// It subscribes system:client.* first, with policy continueAll so that it
// does not keep the events from older subscribers, and its fallback
// patterns after, so it never misses the subscription of an agent it
// started.
func (s *Spawner) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("spawner: Run called twice")
	}
	defer func() {
		if err := s.state.close(); err != nil {
			s.log.Warn("close the spawner's data", "err", err)
		}
	}()
	conn, err := peer.Dial(ctx, s.opts.BusURL, &peer.Options{
		ClientID:   s.opts.ClientID,
		ClientInfo: &protocol.ClientInfo{Name: "bub-spawner", Version: buildinfo.Version()},
		// No HandlerTimeout: a fallback handler waits for a spawn, but
		// only for as long as the bus waits for its answer (the SDK's
		// default stays below the bus's delivery timeout); past that the
		// handler answers should_retry while the agent goes on
		// starting, instead of being delivered the message again while
		// it still waits.
		MaxConcurrentHandlers: s.opts.handlers,
		Logger:                s.log,
		Token:                 s.opts.Token,
	})
	if err != nil {
		s.shutdown()
		return fmt.Errorf("spawner: %w", err)
	}
	go s.events.run(conn)
	s.deliveryTimeout = time.Duration(conn.Limits().DeliveryTimeoutMs) * time.Millisecond
	if s.deliveryTimeout <= 0 {
		s.deliveryTimeout = defaultDeliveryTimeout
	}
	defer func() {
		s.shutdown()
		s.events.close(5 * time.Second)
		conn.Close()
	}()
	if err := conn.Subscribe(ctx, protocol.ClientEventsPattern, s.handleClientEvent, &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll, MaxConcurrentHandlers: clientEventHandlers}); err != nil {
		return fmt.Errorf("spawner: %w", err)
	}
	for _, p := range s.opts.Patterns {
		if err := conn.Subscribe(ctx, p, s.handleFallback, &peer.SubscribeOptions{Fallback: true}); err != nil {
			return fmt.Errorf("spawner: %w", err)
		}
	}
	// Under mu: a delivery may already be claiming a slot.
	s.mu.Lock()
	known := len(s.slots)
	s.mu.Unlock()
	s.log.Info("spawner serving", "bus", redact.URLs(s.opts.BusURL), "client_id", s.opts.ClientID, "patterns", s.opts.Patterns,
		"command", s.command, "workspace_root", s.root, "data_dir", s.opts.DataDir, "max_agents", s.opts.MaxAgents,
		"idle_timeout", s.opts.IdleTimeout, "known_topics", known)
	select {
	case <-ctx.Done():
		return nil
	case <-conn.Done():
		return fmt.Errorf("spawner: connection to %s ended: %w", redact.URLs(s.opts.BusURL), conn.Err())
	}
}

// AgentInfo describes one running agent.
type AgentInfo struct {
	ID        string
	Topic     string
	Workspace string
	PID       int // 0 while starting
	Ready     bool
	// Busy says a delivery to the agent is in flight, as the bus last
	// reported (system:client.busy and system:client.idle), for no longer
	// than the bus's delivery timeout and a margin.
	Busy bool
	// LastActive is when the agent last became busy, idle or ready (as
	// the bus's system:client.busy/idle events tell): the least recently
	// active idle agent makes room at capacity.
	LastActive time.Time
	Started    time.Time
}

// Agents returns the agents that are starting or running, by topic.
func (s *Spawner) Agents() []AgentInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]AgentInfo, 0, len(s.agents))
	for _, a := range s.agents {
		info := AgentInfo{ID: a.id, Topic: a.slot.topic, Workspace: a.workspace, Ready: a.ready, Busy: s.busyLocked(a), LastActive: a.lastActive, Started: a.started}
		if a.proc != nil {
			info.PID = a.proc.Pid
		}
		list = append(list, info)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Topic < list[j].Topic })
	return list
}

// handleFallback handles a message that no agent subscribes to: it finds
// or starts (wakes) the topic's agent, waits until the agent subscribes
// to a pattern matching the topic, and asks the bus to route the message
// again, so that the agent gets it through its own subscription. At
// capacity it queues the conversation and asks the bus to hold the
// message, which the agent's subscribe routes again once the queue has
// started it (acquire). It never answers processed: the message is the
// agent's to process.
func (s *Spawner) handleFallback(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
	reason := ReasonMessage
	if d.Type() == protocol.TypeSubscriptionEvent {
		reason = ReasonToolEvent
	}
	a, refusal := s.await(ctx, d.Topic, reason, true)
	if refusal != nil {
		return *refusal, nil
	}
	return peer.Result{ShouldRetry: true, Message: fmt.Sprintf("agent %s subscribes to %s; route the message again", a.id, d.Topic)}, nil
}

// refusal is the answer to a message no agent can be started for now.
func (s *Spawner) refusal(topic string, err error) peer.Result {
	r := peer.Result{ShouldRetry: true, Message: fmt.Sprintf("no agent for %s: %v", topic, err)}
	switch {
	case errors.Is(err, ErrAtCapacity):
		r.RetryAfter = queuedRetryAfter
	case errors.Is(err, ErrBackedOff):
		s.mu.Lock()
		if sl := s.slotOfLocked(topic); sl != nil {
			r.RetryAfter = max(time.Until(sl.notBefore), 0)
		}
		s.mu.Unlock()
	default:
		r.RetryAfter = time.Second
	}
	return r
}

// claim returns the agent that serves topic, reserving a new one when
// there is none; launch says the caller must start it, and created is a
// slot made for a topic never served, whose agent id the caller records.
// A message on agent:{id} of an agent the spawner knows goes to that
// agent's slot, so a direct message brings back the agent it was meant
// for. reason is why, should the start be a wake.
func (s *Spawner) claim(topic, reason string) (a *agent, launch bool, created *slot, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slotOfLocked(topic)
	if sl == nil && !s.closing {
		sl = &slot{topic: topic, agentID: s.newAgentIDLocked()}
		s.slots[topic] = sl
		s.byAgent[peer.AgentTopic(sl.agentID)] = sl
		created = sl
	}
	if sl != nil && sl.agent != nil {
		return sl.agent, false, created, nil
	}
	if sl == nil {
		return nil, false, nil, ErrClosed
	}
	a, err = s.reserveLocked(sl, reason)
	if err != nil {
		return nil, false, created, err
	}
	return a, true, created, nil
}

// slotOfLocked returns the slot that serves topic, or nil.
func (s *Spawner) slotOfLocked(topic string) *slot {
	if sl := s.slots[topic]; sl != nil {
		return sl
	}
	return s.byAgent[topic]
}

// newAgentIDLocked returns an agent id no slot has.
func (s *Spawner) newAgentIDLocked() string {
	for {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		id := "agent-" + hex.EncodeToString(b)
		if s.byAgent[peer.AgentTopic(id)] == nil {
			return id
		}
	}
}

// reserveLocked counts a new agent for sl, if the limits allow one; the
// caller then starts it with launch. When sl's agent was hibernated, the
// start is a wake, for reason.
func (s *Spawner) reserveLocked(sl *slot, reason string) (*agent, error) {
	switch {
	case s.closing:
		return nil, ErrClosed
	case len(s.agents) >= s.opts.MaxAgents:
		return nil, fmt.Errorf("%w: %d agents running", ErrAtCapacity, len(s.agents))
	case time.Now().Before(sl.notBefore):
		return nil, fmt.Errorf("%w: %d in a row, next start at %s", ErrBackedOff, sl.failures, sl.notBefore.UTC().Format(time.RFC3339))
	}
	a := newAgent(sl.agentID, sl)
	if sl.queued != "" {
		// Started otherwise (a wake, or its message routed again when a
		// place was free): the queue must not start it again later.
		s.queue = slices.DeleteFunc(s.queue, func(q *slot) bool { return q == sl })
		sl.queued = ""
	}
	if sl.asleep {
		a.wake = reason
		sl.asleep = false
	}
	sl.agent = a
	s.agents[a.id] = a
	s.agentsDone.Add(1)
	return a, nil
}

// launch starts the reserved agent a, then watches it: a reaper waits for
// its exit, and a watchdog stops it if it is not ready in time.
func (s *Spawner) launch(a *agent) {
	topic := a.slot.topic
	dir, err := workspaceDir(s.root, topic)
	if err != nil {
		s.finish(a, nil, err)
		return
	}
	log := s.log.With("agent_id", a.id)
	stdout := &lineLogger{log: log, stream: "stdout"}
	stderr := &lineLogger{log: log, stream: "stderr"}
	cmd := exec.Command(s.command[0], s.command[1:]...)
	cmd.Dir = dir
	token := ""
	if s.opts.Issuer != nil {
		if token, err = s.opts.Issuer.mint(a.id, topic, time.Now()); err != nil {
			s.finish(a, nil, fmt.Errorf("mint a credential for %s: %w", a.id, err))
			return
		}
	}
	cmd.Env = agentEnv(s.opts.Env, s.opts.BusURL, a.id, topic, dir, token)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Something the agent started may keep its output open after it
	// exits; that must not keep the agent counted for ever.
	cmd.WaitDelay = 2 * time.Second
	configureProcess(cmd)
	if err := cmd.Start(); err != nil {
		s.finish(a, nil, fmt.Errorf("start %s: %w", s.command[0], err))
		return
	}

	s.mu.Lock()
	a.workspace = dir
	a.proc = cmd.Process
	a.started = time.Now()
	a.watchdog = time.AfterFunc(s.opts.SpawnTimeout, func() { s.expire(a) })
	stop := s.closing
	if stop {
		a.stopping = true
	}
	s.mu.Unlock()
	s.events.publish(Event{Event: EventSpawned, AgentID: a.id, Topic: topic, Workspace: dir, PID: cmd.Process.Pid})
	if a.wake != "" {
		s.metrics.wakes.WithLabelValues(a.wake).Inc()
		s.events.publish(Event{Event: EventWoken, AgentID: a.id, Topic: topic, Workspace: dir, PID: cmd.Process.Pid, Reason: a.wake})
	}
	if stop {
		s.terminate(a)
	}
	go func() {
		err := cmd.Wait()
		stdout.flush()
		stderr.flush()
		s.finish(a, cmd, err)
	}()
}

// expire stops an agent that did not become ready within SpawnTimeout.
func (s *Spawner) expire(a *agent) {
	s.mu.Lock()
	if a.ready || a.stopping {
		s.mu.Unlock()
		return
	}
	a.stopping = true
	a.failure = fmt.Errorf("%w: no subscription matching %s within %s", ErrSpawnTimeout, a.slot.topic, s.opts.SpawnTimeout)
	s.mu.Unlock()
	s.terminate(a)
}

// terminate asks a started agent to stop with SIGTERM, and kills it if it
// has not exited after StopTimeout.
func (s *Spawner) terminate(a *agent) {
	s.mu.Lock()
	proc := a.proc
	s.mu.Unlock()
	if proc == nil {
		return
	}
	_ = signalAgent(proc, syscall.SIGTERM)
	go func() {
		select {
		case <-a.exited:
		case <-time.After(s.opts.StopTimeout):
			s.log.Warn("agent ignored SIGTERM; killing it", "agent_id", a.id, "waited", s.opts.StopTimeout)
			_ = signalAgent(proc, syscall.SIGKILL)
		}
	}()
}

// finish reaps agent a: cmd and waitErr are how its process ended (cmd is
// nil when it never started, and waitErr why). It counts failures for the
// backoff, publishes what happened, and schedules a restart after a crash.
func (s *Spawner) finish(a *agent, cmd *exec.Cmd, waitErr error) {
	sl := a.slot
	now := time.Now()

	s.mu.Lock()
	if a.watchdog != nil {
		a.watchdog.Stop()
	}
	if a.idleTimer != nil {
		a.idleTimer.Stop()
	}
	delete(s.agents, a.id)
	if sl.agent == a {
		sl.agent = nil
	}
	// Hibernated: asleep until the next message, unless the bus gave
	// it one as it stopped and will retry that to its id.
	hibernated := a.hibernate != "" && a.failure == nil
	rewake := hibernated && a.rewake != "" && !s.closing
	if hibernated {
		sl.asleep = true
		s.metrics.hibernations.WithLabelValues(a.hibernate).Inc()
	}
	s.freedLocked()
	var status string
	code := 0
	if cmd != nil {
		status, code = exitDetail(cmd, waitErr)
	}
	healthy := a.ready && !a.started.IsZero() && now.Sub(a.started) >= s.opts.RestartDelayMax
	failed := !a.ready || (crashed(waitErr) && !a.stopping)
	switch {
	case healthy && !failed:
		sl.failures = 0
	case healthy:
		sl.failures = 1
	case failed:
		sl.failures++
	default:
		// A clean exit, or one the spawner asked for, after being ready.
		sl.failures = 0
	}
	var failure error
	if !a.ready {
		failure = a.failure
		switch {
		case failure != nil:
		case cmd == nil:
			failure = waitErr
		default:
			failure = fmt.Errorf("%w to a pattern matching %s: %s", ErrExitedEarly, sl.topic, status)
		}
		a.failure = failure
	}
	if failed {
		sl.notBefore = now.Add(s.backoff(sl.failures))
	}
	restart := a.ready && failed && !s.closing && sl.failures <= s.opts.MaxRestarts
	if restart {
		sl.restart = time.AfterFunc(time.Until(sl.notBefore), func() { s.restart(sl) })
	}
	workspace, pid := a.workspace, 0
	if a.proc != nil {
		pid = a.proc.Pid
	}
	// Published before the place is given up, so that the exit is
	// reported before the spawn of an agent taking the place.
	next := ""
	if restart {
		next = sl.notBefore.UTC().Format(time.RFC3339Nano)
	}
	if failure != nil {
		s.events.publish(Event{Event: EventSpawnFailed, AgentID: a.id, Topic: sl.topic, Workspace: workspace, PID: pid, Error: failure.Error()})
	}
	if cmd != nil {
		s.events.publish(Event{Event: EventExited, AgentID: a.id, Topic: sl.topic, Workspace: workspace, PID: pid,
			Status: status, ExitCode: &code, Restarting: restart, NextStart: next})
	}
	if hibernated {
		s.events.publish(Event{Event: EventHibernated, AgentID: a.id, Topic: sl.topic, Workspace: workspace, PID: pid, Reason: a.hibernate})
	}
	close(a.exited)
	if rewake {
		s.goWakeLocked(sl, a.rewake)
	}
	s.mu.Unlock()
	s.agentsDone.Done()
}

// backoff is the wait before the next start after n failures in a row.
func (s *Spawner) backoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return backoff.Exponential(s.opts.RestartDelay, s.opts.RestartDelayMax, n-2)
}

// restart starts sl's agent again after a crash, unless something else
// (a message) already did, or the spawner is closing.
func (s *Spawner) restart(sl *slot) {
	s.mu.Lock()
	sl.restart = nil
	if sl.agent != nil || s.closing {
		s.mu.Unlock()
		return
	}
	a, err := s.reserveLocked(sl, ReasonRetry)
	s.mu.Unlock()
	if err != nil {
		s.events.publish(Event{Event: EventSpawnFailed, AgentID: sl.agentID, Topic: sl.topic, Error: fmt.Sprintf("restart: %v", err)})
		return
	}
	s.launch(a)
}

// handleClientEvent follows the bus's reports of subscriptions, to learn
// when an agent it started is ready. It answers processed: false, so the
// event goes on to everyone else who listens.
func (s *Spawner) handleClientEvent(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	if d.From != d.Conn.ServerID() {
		// Only the bus speaks on system:client.*; a peer that publishes
		// there (an open bus refuses it too) must not make the spawner
		// believe an agent is ready.
		s.log.Warn("ignoring a client event not from the bus", "from", d.From, "topic", d.Topic, "message_id", d.MessageID)
		return peer.Result{}, nil
	}
	var ev protocol.ClientEvent
	if err := json.Unmarshal(d.Payload, &ev); err != nil {
		s.log.Warn("undecodable client event", "topic", d.Topic, "message_id", d.MessageID, "err", err)
		return peer.Result{}, nil
	}
	at, _ := time.Parse(time.RFC3339Nano, ev.Timestamp)
	s.mu.Lock()
	if ev.Event == protocol.EventWake {
		s.wakeHeldLocked(&ev)
		s.mu.Unlock()
		return peer.Result{}, nil
	}
	a := s.agents[ev.ClientID]
	if a == nil && ev.Event == protocol.EventBusy {
		// Delivered a message as it stopped, and reaped since: the bus
		// retries that message to the agent's id.
		if sl := s.byAgent[peer.AgentTopic(ev.ClientID)]; sl != nil && sl.agent == nil && sl.asleep {
			s.goWakeLocked(sl, ReasonRetry)
		}
	}
	if a == nil || (ev.Fallback != nil && *ev.Fallback) {
		s.mu.Unlock()
		return peer.Result{}, nil
	}
	var becameReady bool
	var wakeTime time.Duration
	switch ev.Event {
	case protocol.EventConnected:
		a.connectedAt = at
		if a.busy {
			// A new connection holds no delivery. The idle event of
			// the last one may never come: a bus that restarts cuts
			// the delivery and loses its event. Kept busy, the agent
			// would never be hibernated nor make room until its next
			// delivery, which a quiet conversation never sends.
			a.busy = false
			a.lastActive = time.Now()
			if !a.stopping && a.ready {
				s.armIdleLocked(a)
			}
			s.freedLocked()
		}
	case protocol.EventBusy, protocol.EventIdle:
		if a.connectedAt.IsZero() || at.Before(a.connectedAt) {
			// Of the agent's previous process, which has gone.
			break
		}
		a.busy = ev.Event == protocol.EventBusy
		a.lastActive = time.Now()
		if a.busy {
			if !a.stopping {
				s.armIdleLocked(a)
			}
			// Stopping to hibernate, it was delivered a message after
			// all: it is woken again for the bus's retry of it.
			if a.hibernate != "" {
				a.rewake = ReasonRetry
			}
			break
		}
		a.served = true
		if !a.stopping {
			s.armIdleLocked(a)
		}
		s.freedLocked()
	case protocol.EventSubscribed:
		p, err := protocol.ParsePattern(ev.Pattern)
		if err != nil {
			break
		}
		if at.After(a.lastSubscribed) {
			a.lastSubscribed = at
		}
		a.patterns = append(a.patterns, p)
		if !a.ready && p.Match(a.slot.topic) {
			a.ready = true
			becameReady = true
			if a.watchdog != nil {
				a.watchdog.Stop()
			}
			a.readyAt = time.Now()
			a.lastActive = a.readyAt
			if !a.stopping {
				s.armIdleLocked(a)
			}
			if a.wake != "" {
				wakeTime = a.readyAt.Sub(a.reserved)
			}
		}
		a.notifyLocked()
	case protocol.EventUnsubscribed:
		for i, p := range a.patterns {
			if p.String() == ev.Pattern {
				a.patterns = append(a.patterns[:i], a.patterns[i+1:]...)
				break
			}
		}
		a.notifyLocked()
	case protocol.EventDisconnected:
		if !at.Before(a.lastSubscribed) {
			a.patterns = nil
			a.notifyLocked()
		}
	}
	var pid int
	if a.proc != nil {
		pid = a.proc.Pid
	}
	info := Event{Event: EventReady, AgentID: a.id, Topic: a.slot.topic, Workspace: a.workspace, PID: pid}
	s.mu.Unlock()
	if becameReady {
		s.events.publish(info)
		s.registerWaker(d.Conn, info.AgentID)
	}
	if wakeTime > 0 {
		s.metrics.wakeSeconds.Observe(wakeTime.Seconds())
	}
	return peer.Result{}, nil
}

// shutdown stops taking new agents and stops every running one, waiting
// until all are reaped.
func (s *Spawner) shutdown() {
	s.mu.Lock()
	s.closing = true
	var running []*agent
	for _, a := range s.agents {
		a.stopping = true
		running = append(running, a)
	}
	for _, sl := range s.slots {
		if sl.restart != nil {
			sl.restart.Stop()
			sl.restart = nil
		}
	}
	// Conversations waiting for a place, and wakes, look again and find
	// the spawner closing.
	s.freedLocked()
	s.mu.Unlock()
	if len(running) > 0 {
		s.log.Info("stopping agents", "count", len(running), "stop_timeout", s.opts.StopTimeout)
	}
	for _, a := range running {
		s.terminate(a)
	}
	s.agentsDone.Wait()
	// With every agent reaped a wake has nothing left to wait for; the
	// bound is only against a wake stuck elsewhere.
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.StopTimeout)
	defer cancel()
	if s.wakes.Close(ctx) != nil {
		s.log.Warn("wakes for a retry still under way at shutdown", "waited", s.opts.StopTimeout)
	}
}
