package a2a

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// Agent is one bus agent served over A2A.
type Agent struct {
	// Name is the agent's path segment (/a2a/{Name}/) and its card's
	// name: letters, digits, '.', '_' and '-'.
	Name string `yaml:"name"`
	// Description is the card's description.
	Description string `yaml:"description"`
	// Skills are the card's skills; each needs an id and a name.
	Skills []Skill `yaml:"skills"`
	// Topic is the bus topic a SendMessage is published on, the one the
	// agent subscribes (for example tg:a2a or agent:echo).
	Topic string `yaml:"topic"`
	// ClientID is the bus identity the server acts as for this agent:
	// the from of what it publishes, and the subscriber of the agent's
	// answers. Agents may share one.
	ClientID string `yaml:"client_id"`
	// Token is ClientID's credential on the bus, when the bus has auth.
	// It is never logged.
	Token string `yaml:"-"`
	// TokenFile holds Token; bub serve reads it.
	TokenFile string `yaml:"token_file"`
}

// Skill is one skill of an agent's card (A2A's AgentSkill).
type Skill struct {
	// ID identifies the skill within the card. Required.
	ID string `yaml:"id"`
	// Name is the skill's human-readable name. Required.
	Name string `yaml:"name"`
	// Description says what the skill does.
	Description string `yaml:"description"`
	// Tags are keywords for discovery.
	Tags []string `yaml:"tags"`
	// Examples are prompts the skill answers.
	Examples []string `yaml:"examples"`
}

// Caller authenticates an HTTP request for agent: it returns the
// caller's name, which owns the tasks it creates, or an error. An error
// wrapping ErrUnauthenticated is answered 401, any other 403.
type Caller func(r *http.Request, agent *Agent) (string, error)

// ErrUnauthenticated is what a Caller wraps for a request without a
// valid credential.
var ErrUnauthenticated = errors.New("no valid credential")

// Options configure a Server.
type Options struct {
	// BusURL is the bus's WebSocket URL (ws://127.0.0.1:7892/). Required.
	BusURL string
	// Agents are the agents served. Required, at least one.
	Agents []Agent
	// Path is the task store's bbolt file. Required; unused with
	// JetStream.
	Path string
	// JetStream, when set, keeps the task store in the stream BUB_A2A
	// of this JetStream instead of the file at Path, so that the
	// servers of every node of a cluster share their tasks
	// (docs/A2A.md, "Cluster"); bub serve sets it on a cluster node.
	JetStream jetstream.JetStream
	// Replicas is how many copies JetStream keeps of BUB_A2A: the
	// cluster's own streams' count. Default: 1.
	Replicas int
	// Node is this node's id on a cluster. With it the server acts on
	// the bus as ClientID-Node for each agent: a clientId is one
	// connection cluster-wide, and each node's server holds its own.
	Node string
	// PublicURL is the URL the cards give for the agents' interfaces,
	// up to and excluding /a2a/ (https://bus.example.com). Default: the
	// scheme and Host of the request that reads the card.
	PublicURL string
	// Retention is how long a task is kept after its last change, and
	// an idempotency key with it. Default: 24h.
	Retention time.Duration
	// IdempotencyHeaderOnly makes only the Idempotency-Key header mark a
	// SendMessage that starts a task as a retry of an earlier one, and
	// nothing a message to an existing task; by default a repeated
	// messageId does both. For clients that reuse a message id for
	// different messages, as the official TCK does. Default: false.
	IdempotencyHeaderOnly bool
	// BlockTimeout, when positive, bounds how long a blocking
	// SendMessage waits for the task to finish or to wait for its
	// caller; then it answers with the task as it is. The specification
	// says a blocking send MUST wait, so a bound departs from it.
	// Default: 0, it waits until the task does, or the client goes.
	BlockTimeout time.Duration
	// Caller authenticates requests. Default: nil, every request is
	// served as the anonymous caller "", which suits a bus without auth
	// only; bub serve sets it whenever the bus has an auth: section.
	Caller Caller
	// Secured reports whether Caller wants a credential now, for the
	// cards, which declare bearer auth when it does. Default: whether
	// Caller is set; bub serve says whether the bus has auth in force,
	// which a SIGHUP may change.
	Secured func() bool
	// Registerer takes the door's Prometheus metrics (bub_a2a_*).
	// Default: nil, none registered; bub serve gives the bus's registry,
	// so they are on its /metrics.
	Registerer prometheus.Registerer
	// MaxEventsPerTask bounds a task's event log, so that an agent that
	// streams without end cannot fill the disk: an answer beyond it is
	// rejected (the bus dead-letters it). Default: 10000.
	MaxEventsPerTask int
	// MaxRequestBytes bounds a JSON-RPC request body. Default: 1 MiB.
	MaxRequestBytes int64
	// Logger receives the server's log. Default: slog.Default().
	Logger *slog.Logger
}

// Server serves Options.Agents over A2A. It is an http.Handler for the
// paths under /a2a/.
type Server struct {
	opts   Options
	store  taskStore
	agents map[string]*agent
	log    *slog.Logger
	m      *metrics
	// conns are the bus connections, one per ClientID.
	conns map[string]*peer.Conn

	// deadMu guards earlyDead, and orders a dead-letter event against
	// the storing of the message id it names (noteBusMessage).
	deadMu sync.Mutex
	// earlyDead are dead-letter events whose message id no task had
	// when they came.
	earlyDead map[string]deadLetterEvent

	// watchMu guards watchers.
	watchMu sync.Mutex
	// watchers are closed and removed when their task gets an event.
	watchers map[spec.TaskID][]chan struct{}

	// push publishes the events of tasks with push notification configs
	// (push.go); nil on a cluster, which serves no push.
	push *pushers

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// agent is a configured Agent and its bus connection.
type agent struct {
	Agent
	conn *peer.Conn
}

// replyPrefix is the topic prefix of the answers to A2A tasks:
// outbound:a2a-{taskId}, where the echo agent's chat_id puts them.
const replyPrefix = "outbound:a2a-"

// New checks opts, opens the task store, connects to the bus with each
// agent's identity and subscribes the answers' topics. Close releases
// them.
func New(ctx context.Context, opts *Options) (*Server, error) {
	o := *opts
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	if o.MaxEventsPerTask <= 0 {
		o.MaxEventsPerTask = 10000
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = 1 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Secured == nil {
		secured := o.Caller != nil
		o.Secured = func() bool { return secured }
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.BusURL == "" {
		return nil, errors.New("a2a: no bus URL")
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("a2a: register metrics: %w", err)
	}
	s := &Server{opts: o, m: m, agents: map[string]*agent{}, conns: map[string]*peer.Conn{}, log: o.Logger, watchers: map[spec.TaskID][]chan struct{}{}, earlyDead: map[string]deadLetterEvent{}}
	if o.JetStream != nil {
		// No pushers: push configs live beside the tasks in the bbolt
		// file only, and the bus takes no webhook subscriptions on a
		// cluster (docs/A2A.md, "Cluster").
		s.store, err = openJetStore(ctx, o.JetStream, o.Replicas, s.notify)
	} else {
		var bs *boltStore
		if bs, err = openBoltStore(o.Path); err == nil {
			s.store = bs
			s.push = &pushers{store: bs, tasks: map[spec.TaskID]*pusher{}}
		}
	}
	if err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for i := range o.Agents {
		a := &agent{Agent: o.Agents[i]}
		if a.conn = s.conns[a.ClientID]; a.conn == nil {
			if a.conn, err = s.dial(ctx, &a.Agent); err != nil {
				s.Close()
				return nil, err
			}
			s.conns[a.ClientID] = a.conn
		}
		s.agents[a.Name] = a
	}
	s.watchDeadLetters(ctx)
	if err := s.startPush(); err != nil {
		s.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.sweepLoop()
	return s, nil
}

// Validate checks the options but BusURL, as New does, naming the agent
// and field at fault, so that a program can refuse a bad configuration
// before it starts anything (bub serve does so before it knows the
// address it listens on).
func (o *Options) Validate() error {
	if o.Path == "" {
		return errors.New("a2a: no task store path")
	}
	if len(o.Agents) == 0 {
		return errors.New("a2a: no agents configured")
	}
	seen := map[string]bool{}
	for i, a := range o.Agents {
		switch {
		case !validName(a.Name):
			return fmt.Errorf("a2a: agents[%d]: name %q: want letters, digits, '.', '_' or '-'", i, a.Name)
		case seen[a.Name]:
			return fmt.Errorf("a2a: agents[%d]: name %q given twice", i, a.Name)
		case a.ClientID == "":
			return fmt.Errorf("a2a: agent %q: no client_id, the bus identity it acts as", a.Name)
		}
		if err := protocol.ValidateTopic(a.Topic); err != nil {
			return fmt.Errorf("a2a: agent %q: topic %q: %w", a.Name, a.Topic, err)
		}
		for j, sk := range a.Skills {
			if sk.ID == "" || sk.Name == "" {
				return fmt.Errorf("a2a: agent %q: skills[%d]: a skill needs an id and a name", a.Name, j)
			}
		}
		seen[a.Name] = true
	}
	return nil
}

func validName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// dial connects as a's identity and subscribes the answers' prefix,
// which every connection of the server may receive: the task store, not
// the connection, knows whose task an answer belongs to. The
// subscription is durable, so that an answer published while the server
// is down (restarting, or killed with the bus) is held for it and
// reaches the task once it is back; the identity needs a grant with
// durable: true.
func (s *Server) dial(ctx context.Context, a *Agent) (*peer.Conn, error) {
	conn, err := peer.Dial(ctx, s.opts.BusURL, &peer.Options{
		ClientID:   s.clientID(a),
		Token:      a.Token,
		ClientInfo: &protocol.ClientInfo{Name: "bub-a2a"},
		Logger:     s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("a2a: agent %q: connect to the bus as %q: %w", a.Name, s.clientID(a), err)
	}
	// On a cluster, not durable: a durable subscription of a dead
	// node's server would hold the answers for it until it came back,
	// where a plain one leaves the order with its node, and the answers
	// go to another node's server (docs/A2A.md, "Cluster").
	if err := conn.Subscribe(ctx, replyPrefix, s.handleAnswer, &peer.SubscribeOptions{Durable: s.opts.Node == ""}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("a2a: agent %q: subscribe %s as %q: %w", a.Name, replyPrefix, s.clientID(a), err)
	}
	return conn, nil
}

// clientID is the clientId the server acts as for a: its ClientID, and
// on a cluster the node's id after it.
func (s *Server) clientID(a *Agent) string {
	if s.opts.Node == "" {
		return a.ClientID
	}
	return a.ClientID + "-" + s.opts.Node
}

// watchDeadLetters subscribes the bus's dead-letter events on the first
// agent's connection, so that a task whose message the bus gives up on
// fails rather than waits. It needs a grant to subscribe
// system:message.dead_lettered; without one the server runs on, and
// such tasks wait until the retention window ends them.
func (s *Server) watchDeadLetters(ctx context.Context) {
	conn := s.agents[s.opts.Agents[0].Name].conn
	if err := conn.Subscribe(ctx, protocol.TopicDeadLettered, s.handleDeadLetter, nil); err != nil {
		s.log.Warn("a2a: not watching dead letters: a task whose message the bus dead-letters after its retries stays working", "client_id", conn.ClientID(), "err", err)
	}
}

// Close closes the bus connections and the task store; open streams end.
func (s *Server) Close() error {
	s.cancel()
	var errs []error
	for _, c := range s.conns {
		errs = append(errs, c.Close())
	}
	s.wg.Wait()
	errs = append(errs, s.store.close())
	return errors.Join(errs...)
}

// sweepLoop deletes expired tasks now and then.
func (s *Server) sweepLoop() {
	defer s.wg.Done()
	every := min(s.opts.Retention/10, time.Hour)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := s.store.sweep(s.opts.Retention, time.Now()); err != nil {
			s.log.Error("a2a: sweep expired tasks", "err", err)
		} else if n > 0 {
			s.log.Info("a2a: expired tasks deleted", "tasks", n)
		}
		s.sweepPush()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ServeHTTP routes /a2a/.well-known/agent-cards.json (the catalog),
// /a2a/{agent}/.well-known/agent-card.json (a card) and /a2a/{agent}
// and /a2a/{agent}/ (JSON-RPC).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/a2a/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	if rest == ".well-known/agent-cards.json" {
		s.serveCatalog(w, r)
		return
	}
	name, sub, _ := strings.Cut(rest, "/")
	a := s.agents[name]
	if a == nil {
		http.Error(w, fmt.Sprintf("no A2A agent %q here; GET /a2a/.well-known/agent-cards.json lists them", name), http.StatusNotFound)
		return
	}
	switch sub {
	case ".well-known/agent-card.json":
		s.serveCard(w, r, a)
	case "":
		s.serveRPC(w, r, a)
	default:
		http.Error(w, fmt.Sprintf("no %q under agent %q: its card is at .well-known/agent-card.json and JSON-RPC at its base URL", sub, name), http.StatusNotFound)
	}
}

// notify wakes whoever waits for task id's next event.
func (s *Server) notify(id spec.TaskID) {
	s.kickPush(id)
	s.watchMu.Lock()
	ws := s.watchers[id]
	delete(s.watchers, id)
	s.watchMu.Unlock()
	for _, c := range ws {
		close(c)
	}
}

// watch returns a channel closed at task id's next event. Taken before
// reading the store, it cannot miss an event that lands in between.
func (s *Server) watch(id spec.TaskID) <-chan struct{} {
	c := make(chan struct{})
	s.watchMu.Lock()
	s.watchers[id] = append(s.watchers[id], c)
	s.watchMu.Unlock()
	return c
}

// unwatch forgets c, when its waiter gives up.
func (s *Server) unwatch(id spec.TaskID, c <-chan struct{}) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	ws := s.watchers[id]
	for i, w := range ws {
		if w == c {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(s.watchers, id)
	} else {
		s.watchers[id] = ws
	}
}
