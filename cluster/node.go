package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/protocol"
)

// Options configure a Node. Name and NodeID are required, and either
// Routes/ClusterListen (an embedded server) or URL (an external one).
type Options struct {
	// Name is the cluster's name; every node of one cluster uses the same.
	Name string
	// NodeID names this node: 1 to 128 letters, digits, '-' and '_'
	// (protocol.ValidNodeID). It must be
	// unique in the cluster and stable across restarts, since keys in the
	// buckets carry it.
	NodeID string

	// ClusterListen is the host:port the embedded server takes routes
	// from (port 0: any free port). Setting it, or Routes, runs an
	// embedded nats-server in this process. Without Routes the server
	// runs JetStream on its own, with one replica.
	ClusterListen string
	// Routes are the other nodes' cluster addresses (nats://host:port).
	// List every other node: JetStream sizes its quorum from this list,
	// and too short a list lets a minority elect a leader. A route to
	// this node's own ClusterListen is ignored.
	Routes []string
	// ClientListen is the host:port the embedded server takes NATS
	// clients on (the nats CLI, for inspection). Empty: a free port on
	// 127.0.0.1. The node itself connects in-process.
	ClientListen string
	// StoreDir is where the embedded server keeps JetStream's files
	// (DATA_DIR/nats for bub serve). Required with an embedded server.
	StoreDir string

	// URL connects to an external NATS cluster instead of embedding one
	// (comma-separated URLs). It needs JetStream enabled.
	URL string
	// CredsFile is the credentials file for URL, or "".
	CredsFile string

	// Replicas is how many copies JetStream keeps of each bucket. Zero
	// means min(3, nodes), nodes being 1 + the Routes not naming this
	// node for an embedded server; with URL, 3 when the server reports a
	// cluster name, else 1.
	Replicas int

	// HeartbeatInterval is how often this node publishes its heartbeat
	// (and checks the others'). Default 2 s.
	HeartbeatInterval time.Duration
	// NodeTimeout is how long without a heartbeat before a node is
	// presumed dead. Default 10 s; it should be several heartbeats.
	NodeTimeout time.Duration
	// SyncTimeout bounds Sync. Default 2 s.
	SyncTimeout time.Duration
	// StartTimeout bounds Start: server readiness, JetStream's leader
	// elections and the buckets' creation. Default 1 minute: a node
	// that comes back while the others still hold it live can wait tens
	// of seconds for the buckets' leaders.
	StartTimeout time.Duration

	// MaxMessageBytes is the largest message the bus takes (its
	// --max-message-bytes); zero means 1 MiB, the bus's default. A
	// pending entry or dead letter holds a message whole, and a delivery
	// to another node carries it, so NATS's max_payload must be at least
	// this plus RecordOverhead: an embedded server is given that, and
	// Start refuses an external one (URL) whose max_payload is smaller.
	MaxMessageBytes int64

	// CompactInterval is how often the acting node removes old delete
	// markers from the buckets (compact.go). Default 10 minutes.
	CompactInterval time.Duration
	// MarkerAge is how old a delete marker must be before it is removed:
	// a node whose watch is further behind than this (a partition that
	// long) would miss the delete. Default 24 hours.
	MarkerAge time.Duration

	// Logger receives the node's and the embedded server's logs.
	// Default slog.Default().
	Logger *slog.Logger

	// Tests only (export_test.go). deaf drops the heartbeats of the
	// peers it names, as a partition would. removing is called before
	// each try to remove a dead peer's keys, and what it returns with
	// the try's result.
	deaf     func(peer string) bool
	removing func(peer string) (tried func(error))
}

func (o *Options) setDefaults() error {
	switch {
	case o.Name == "":
		return errors.New("cluster: options: Name is empty")
	case !protocol.ValidNodeID(o.NodeID):
		return fmt.Errorf("cluster: options: NodeID %q: want 1 to %d letters, digits, '-' or '_'", o.NodeID, protocol.MaxNodeIDLength)
	case o.URL != "" && (o.ClusterListen != "" || len(o.Routes) > 0):
		return errors.New("cluster: options: URL and an embedded server (ClusterListen, Routes) exclude each other")
	case o.URL == "" && o.ClusterListen == "" && len(o.Routes) == 0:
		return errors.New("cluster: options: neither URL nor ClusterListen/Routes set")
	case o.URL == "" && o.StoreDir == "":
		return errors.New("cluster: options: StoreDir is empty; the embedded server needs it for JetStream")
	case o.MaxMessageBytes < 0 || o.MaxMessageBytes > maxPayloadLimit-RecordOverhead:
		return fmt.Errorf("cluster: options: MaxMessageBytes %d: want 0 (1 MiB) to %d, NATS's largest max_payload less RecordOverhead", o.MaxMessageBytes, maxPayloadLimit-RecordOverhead)
	case o.Replicas < 0 || o.Replicas > 5:
		return fmt.Errorf("cluster: options: Replicas %d: want 0 (auto) to 5", o.Replicas)
	}
	setDuration(&o.HeartbeatInterval, 2*time.Second)
	setDuration(&o.NodeTimeout, 10*time.Second)
	setDuration(&o.SyncTimeout, 2*time.Second)
	setDuration(&o.StartTimeout, time.Minute)
	setDuration(&o.CompactInterval, 10*time.Minute)
	setDuration(&o.MarkerAge, 24*time.Hour)
	if o.NodeTimeout <= o.HeartbeatInterval {
		return fmt.Errorf("cluster: options: NodeTimeout %v must exceed HeartbeatInterval %v", o.NodeTimeout, o.HeartbeatInterval)
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = 1 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// RecordOverhead is what a pending record, a dead letter or a delivery
// frame adds to the message it carries, at most: ids, topic, client
// ids, the attempts with their error texts. NATS's max_payload must be
// at least Options.MaxMessageBytes plus this.
const RecordOverhead = 64 << 10

// maxPayloadLimit is the largest max_payload NATS takes: its client
// pending limit (64 MiB), which a message must fit in.
const maxPayloadLimit = 64 << 20

// maxPayload is the max_payload the node needs.
func (o *Options) maxPayload() int64 { return o.MaxMessageBytes + RecordOverhead }

func setDuration(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Node is this process's membership of the cluster. Its methods are safe
// for concurrent use.
type Node struct {
	opts    Options
	handler Handler
	id      string
	// run names this run of the node, new at each Start: the keys it
	// writes carry it, so that the node acting for a previous run,
	// presumed dead, leaves this run's alone.
	run string
	log *slog.Logger

	server *server.Server // nil with an external NATS
	// serverLog is the embedded server's log, which knows the routes
	// failing; nil with an external NATS.
	serverLog *serverLog
	// storeLock holds StoreDir locked while the embedded server runs.
	storeLock *os.File
	// size is how many nodes the configuration names (this one and its
	// routes), whose majority JetStream needs; 0 with an external NATS,
	// whose quorum is its own.
	size int
	nc   *nats.Conn
	js   jetstream.JetStream

	subs, clients, nodes, pending jetstream.KeyValue
	// toolSubs holds the tool subscriptions (toolsub.go).
	toolSubs jetstream.KeyValue
	// durable holds the owners of durable subscriptions (durable.go).
	durable  jetstream.KeyValue
	dlq      jetstream.Stream
	replicas int
	store    *Store
	// idempotency holds the idempotency keys (idempotency.go).
	idempotency jetstream.KeyValue

	// ctx ends when the node closes; handlers of remote deliveries run
	// under it.
	ctx    context.Context
	cancel context.CancelFunc
	// goMu guards stopping and orders wg.Add before wg.Wait.
	goMu     sync.Mutex
	stopping bool
	// wg counts the node's goroutines.
	wg        sync.WaitGroup
	closeOnce sync.Once
	closed    atomic.Bool

	order    subscriptionOrder
	replies  replies
	inbound  inbound
	liveness liveness
	claims   claims

	// natsSubs are the core subscriptions (sync, deliver, replies),
	// stopped at close.
	natsSubs []*nats.Subscription
	// watchMu guards watches, the bucket watches (watch.go).
	watchMu sync.Mutex
	watches []*watch

	syncTimeouts atomic.Uint64

	// startState is what Start waits for, for reportWaiting.
	startState startState
}

// Handler is what a node tells its user: the bus, through ForBus.
type Handler struct {
	// ApplySubscription is called for every change of BUB_SUBS, in
	// revision order, from one goroutine: first the current
	// subscriptions (before Start returns), then every change. Required.
	ApplySubscription func(SubscriptionChange)
	// TakenOver is called when another connection claimed a clientId
	// this node claimed, with the connection that lost it. It runs on
	// the clients watcher's goroutine: it must not block. Optional.
	TakenOver func(clientID string, conn uint64)
	// ClaimRemoved is called when another node deleted a claim this
	// node holds: it presumed this node dead (a pause, a partition) and
	// removed its claims and subscriptions. Nobody took the clientId, so
	// the client should reconnect, not give up as after TakenOver. It
	// runs on the clients watcher's goroutine: it must not block.
	// Optional.
	ClaimRemoved func(clientID string, conn uint64)
	// Deliver handles another node's delivery request for a connection
	// of this node; its result is returned to the requesting node as is.
	// ctx ends when the node closes; the handler bounds its own wait.
	// Optional: without it, requests are answered with an error.
	Deliver func(ctx context.Context, d *Delivery) ([]byte, error)
	// Survey answers another node's request of op (Node.Survey); its
	// result is returned as is, its error as its text. ctx ends when the
	// node closes. Optional: without it, surveys are answered with an
	// error.
	Survey func(ctx context.Context, op string, req []byte) ([]byte, error)
	// NodeDown is called when a node is presumed dead or left, on a
	// goroutine of its own; the acting node deletes the node's
	// subscriptions and claims meanwhile. acting says whether this node
	// is the one to take over the dead node's other duties. Optional.
	NodeDown func(node string, acting bool)
}

// Start joins the cluster: it starts the embedded server or connects to
// URL, waits for JetStream's metadata leader, creates or binds the
// buckets, removes what a previous run of this node left in them, loads
// the current subscriptions through h.ApplySubscription and starts the
// heartbeat. It returns once the node is live; ctx and StartTimeout bound
// it.
func Start(ctx context.Context, opts *Options, h Handler) (*Node, error) {
	n := &Node{opts: *opts, handler: h}
	if err := n.opts.setDefaults(); err != nil {
		return nil, err
	}
	if h.ApplySubscription == nil {
		return nil, errors.New("cluster: handler: ApplySubscription is nil")
	}
	n.id = n.opts.NodeID
	n.run = rand.Text()
	n.log = n.opts.Logger.With("node", n.id)
	n.ctx, n.cancel = context.WithCancel(context.Background())

	ctx, cancel := context.WithTimeout(ctx, n.opts.StartTimeout)
	defer cancel()
	if err := n.start(ctx); err != nil {
		n.shutdown(false)
		return nil, fmt.Errorf("cluster: start node %s: %w", n.id, err)
	}
	n.log.Info("cluster node started", "cluster", n.opts.Name, "replicas", n.replicas, "embedded", n.server != nil)
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	nodes, err := n.connect(ctx)
	if err != nil {
		return err
	}
	defer n.reportWaiting(ctx)()
	n.js, err = jetstream.New(n.nc)
	if err != nil {
		return fmt.Errorf("jetstream client: %w", err)
	}
	err = n.retryUntil(ctx, "wait for JetStream (metadata leader)", time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		_, err := n.js.AccountInfo(ctx)
		return err
	})
	if err != nil {
		return err
	}
	n.replicas = n.opts.Replicas
	if n.replicas == 0 {
		n.replicas = min(3, nodes)
	}
	what := fmt.Sprintf("create buckets with %d replicas", n.replicas)
	if err := n.retryUntil(ctx, what, 5*time.Second, 200*time.Millisecond, n.createBuckets); err != nil {
		return err
	}
	// A previous run of this node may have left keys behind (it crashed
	// and came back before anyone presumed it dead): its connections are
	// gone, so its subscriptions and claims go too, before this run
	// writes any.
	// Each step from here on is repeated until it succeeds: a stream
	// electing a leader (a peer restarting, a partition healing) answers
	// nothing for a while, and a node that gave up then would exit where
	// waiting a few seconds would have joined (the cluster test's rolling
	// restart saw "register in BUB_NODES: nats: no response from stream").
	err = n.retryUntil(ctx, "remove keys of a previous run", 5*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		return n.removeNodeKeys(ctx, n.id, "")
	})
	if err != nil {
		return err
	}
	if n.store, err = n.openStore(ctx); err != nil {
		return err
	}
	if err := n.startSubscriptionWatch(ctx); err != nil {
		return err
	}
	if err := n.startClientWatch(ctx); err != nil {
		return err
	}
	if err := n.startDeliveryService(); err != nil {
		return err
	}
	if err := n.startSurveyService(); err != nil {
		return err
	}
	return n.startLiveness(ctx)
}

// connect starts the embedded server, if any, and connects to NATS. It
// returns how many nodes the configuration names, for the default
// replica count.
func (n *Node) connect(ctx context.Context) (nodes int, err error) {
	natsOpts := []nats.Option{
		nats.Name("bub-node-" + n.id),
		// The node must outlive NATS outages: it reconnects for ever and
		// its watchers resume where they were.
		nats.MaxReconnects(-1),
		nats.ErrorHandler(n.natsError),
	}
	if n.opts.URL != "" {
		if n.opts.CredsFile != "" {
			natsOpts = append(natsOpts, nats.UserCredentials(n.opts.CredsFile))
		}
		n.nc, err = nats.Connect(n.opts.URL, natsOpts...)
		if err != nil {
			return 0, fmt.Errorf("connect to NATS %s: %w", n.opts.URL, err)
		}
		if mp := n.nc.MaxPayload(); mp < n.opts.maxPayload() {
			return 0, fmt.Errorf("NATS %s: max_payload %d is too small for MaxMessageBytes %d (--max-message-bytes) plus %d of record overhead: raise the server's max_payload to %d or lower MaxMessageBytes",
				n.opts.URL, mp, n.opts.MaxMessageBytes, RecordOverhead, n.opts.maxPayload())
		}
		if n.nc.ConnectedClusterName() != "" {
			return 3, nil
		}
		return 1, nil
	}
	// Before the server touches StoreDir: a second node there would
	// damage the first one's JetStream files.
	if n.storeLock, err = lockStoreDir(n.opts.StoreDir); err != nil {
		return 0, err
	}
	n.server, n.serverLog, nodes, err = startServer(ctx, &n.opts, n.log)
	if err != nil {
		return 0, err
	}
	n.size = nodes
	n.nc, err = nats.Connect("", append(natsOpts, nats.InProcessServer(n.server))...)
	if err != nil {
		return 0, fmt.Errorf("connect in-process to the embedded server: %w", err)
	}
	return nodes, nil
}

// retryUntil calls attempt, each call bounded by per, every pause until
// it succeeds or ctx ends; the error names what and the last failure.
// The cluster's start waits on its peers this way: until JetStream has a
// metadata leader a request gets no answer at all (hence the bound on
// each), and until enough servers joined it refuses to place replicas.
func (n *Node) retryUntil(ctx context.Context, what string, per, pause time.Duration, attempt func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, per)
		err := attempt(actx)
		cancel()
		if err == nil {
			return nil
		}
		n.startState.tried(what, err)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			// Why it stopped is ctx's end: the last attempt's own error
			// may be its per-attempt deadline, when that came with the
			// cancel (TestStartStopsWhenCancelled cancels at 1 s, the
			// first attempt's deadline).
			return fmt.Errorf("%s: %w (the last attempt: %w)", what, context.Cause(ctx), err)
		}
	}
}

// Buckets, as docs/CLUSTER.md lists them.
const (
	bucketSubs    = "BUB_SUBS"
	bucketClients = "BUB_CLIENTS"
	bucketNodes   = "BUB_NODES"
	bucketPending = "BUB_PENDING"
	// bucketToolSubs: the tool subscriptions, by the hash of their
	// callback id.
	bucketToolSubs = "BUB_TOOL_SUBSCRIPTIONS"
	// bucketDurable: the owners of durable subscriptions, by clientId.
	bucketDurable = "BUB_DURABLE"
	streamDLQ     = "BUB_DLQ"
)

// createBuckets creates the buckets and the dead-letter stream, or binds
// them when another node created them first.
func (n *Node) createBuckets(ctx context.Context) error {
	// markerTTL, when set, lets the bucket's keys carry a TTL each.
	kv := func(name, what string, markerTTL time.Duration) (jetstream.KeyValue, error) {
		cfg := jetstream.KeyValueConfig{
			Bucket:         name,
			Description:    what,
			History:        1,
			Storage:        jetstream.FileStorage,
			Replicas:       n.replicas,
			LimitMarkerTTL: markerTTL,
		}
		b, err := n.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			// Created before with another configuration (another
			// replica count): use it as it is rather than fight over it.
			n.log.Warn("cluster bucket exists with another configuration; using it", "bucket", name, "err", err)
			b, err = n.js.KeyValue(ctx, name)
		}
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", name, err)
		}
		return b, nil
	}
	var err error
	if n.subs, err = kv(bucketSubs, "bub: the subscription order", 0); err != nil {
		return err
	}
	if n.clients, err = kv(bucketClients, "bub: which node holds each clientId", 0); err != nil {
		return err
	}
	if n.nodes, err = kv(bucketNodes, "bub: node heartbeats", 0); err != nil {
		return err
	}
	if n.pending, err = kv(bucketPending, "bub: retries and held messages", 0); err != nil {
		return err
	}
	if n.idempotency, err = kv(bucketIdempotency, "bub: idempotency keys of publishes", idempotencyMarkerTTL); err != nil {
		return err
	}
	if n.toolSubs, err = kv(bucketToolSubs, "bub: tool subscriptions", 0); err != nil {
		return err
	}
	if n.durable, err = kv(bucketDurable, "bub: owners of durable subscriptions", 0); err != nil {
		return err
	}
	n.dlq, err = n.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        streamDLQ,
		Description: "bub: the dead-letter queue",
		Subjects:    []string{"bub.dlq.>"},
		Storage:     jetstream.FileStorage,
		Replicas:    n.replicas,
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", streamDLQ, err)
	}
	return nil
}

// ID returns this node's id.
func (n *Node) ID() string { return n.id }

// Replicas returns the replica count the buckets were created with.
func (n *Node) Replicas() int { return n.replicas }

// SyncTimeouts returns how many Sync calls ended without every live
// node's answer (bub_cluster_sync_timeouts_total).
func (n *Node) SyncTimeouts() uint64 { return n.syncTimeouts.Load() }

// Close leaves the cluster: it deletes this node's subscriptions, claims
// and BUB_NODES entry and tells the others it leaves (so they need not
// wait for the node timeout),
// stops the watchers and the delivery service, waits for deliveries being
// handled to return, and shuts the embedded server down. ctx bounds the
// clean-up writes; the shutdown happens regardless.
func (n *Node) Close(ctx context.Context) error {
	var err error
	n.closeOnce.Do(func() {
		// In a minority the writes cannot be made, and would only wait
		// out ctx: the node that acts for the cluster once a majority is
		// back removes the keys, as for a node that died.
		removed := n.quorum()
		n.closed.Store(true)
		if removed == nil {
			_, left := n.deleteKey(ctx, bucketNodes, n.id, anyRevision)
			removed = errors.Join(n.removeNodeKeys(ctx, n.id, n.run), left)
		}
		err = errors.Join(
			removed,
			n.heartbeat(beatLeft),
			n.nc.FlushWithContext(ctx),
		)
		if err != nil {
			err = fmt.Errorf("cluster: node %s: leave: %w", n.id, err)
		}
		n.shutdown(true)
	})
	return err
}

// shutdown stops everything the node started. clean false is a crash as
// far as the cluster can tell: NATS and the embedded server stop at once,
// and the other nodes notice only by missing heartbeats.
func (n *Node) shutdown(clean bool) {
	n.closed.Store(true)
	n.cancel()
	if !clean && n.nc != nil {
		n.nc.Close()
	}
	for _, s := range n.natsSubs {
		_ = s.Unsubscribe()
	}
	// Stopping a watcher closes its channel, which ends its goroutine.
	n.watchMu.Lock()
	for _, wt := range n.watches {
		wt.stop()
	}
	n.watchMu.Unlock()
	if n.store != nil {
		n.store.stop()
	}
	// Deliveries being handled see ctx end; waiting for them before
	// closing the connection lets their answers leave.
	n.goMu.Lock()
	n.stopping = true
	n.goMu.Unlock()
	n.wg.Wait()
	if n.nc != nil {
		n.nc.Close()
	}
	if n.server != nil {
		n.server.Shutdown()
		n.server.WaitForShutdown()
	}
	if n.storeLock != nil {
		n.storeLock.Close()
	}
}

// Crash stops the node as a kill -9 of its process looks to the rest of
// the cluster: the embedded server and the connection go at once, and no
// key is removed, so the others notice only by the missing heartbeats
// and take over its duties then. For tests and failover drills.
func (n *Node) Crash() {
	n.closeOnce.Do(func() { n.shutdown(false) })
}

// goFunc runs f on a goroutine counted by the node, so Close waits for
// it. Once shutdown has begun it refuses and returns false: adding to a
// WaitGroup being waited on is a race.
func (n *Node) goFunc(f func()) bool {
	n.goMu.Lock()
	defer n.goMu.Unlock()
	if n.stopping {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// Ready returns nil when this node can serve: it hears a majority of
// the nodes (else ErrNoQuorum, within a node timeout of losing them),
// its NATS connection is up and, with an embedded server, JetStream's
// meta layer on it is current
// (it knows the meta leader and has caught up with it). A node that
// came back from a crash or a partition reports why not until then, so
// that a rolling restart waits for it before it takes the next node down:
// taking a second replica away while one is still catching up stalls the
// buckets.
func (n *Node) Ready() error {
	if n.closed.Load() {
		return ErrClosed
	}
	if err := n.quorum(); err != nil {
		return fmt.Errorf("cluster: node %s: %w", n.id, err)
	}
	if st := n.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("cluster: node %s: NATS connection %s", n.id, st)
	}
	if n.server == nil {
		return nil
	}
	// The meta layer only: nats-server's checks of a stream take in every
	// consumer placed on this server, and the ephemeral consumers of the
	// watches that died with this node stay "not found" there for minutes
	// (a node back from kill -9 was unready for over 90 s).
	if h := n.server.Healthz(&server.HealthzOptions{JSMetaOnly: true}); h.Status != "ok" {
		return fmt.Errorf("cluster: node %s: JetStream not current: %s", n.id, h.Error)
	}
	return nil
}
