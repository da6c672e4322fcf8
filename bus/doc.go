// Package bus is the core of the bub-bus server (docs/ARCHITECTURE.md):
// peers connect over WebSocket, speak JSON-RPC 2.0 (docs/PROTOCOL.md),
// subscribe to topic patterns and publish messages, which the bus
// delivers to subscribers with processMessage and acknowledges to the
// publisher. Its add-ons (the HTTP API, webhooks, the journal, the
// console, tool subscriptions, traces, the operator's methods) are
// packages of their own that register on its seams (extend.go).
//
// Start with Server: New builds one from Options, ServeHTTP serves peers
// and the /healthz, /readyz and /metrics endpoints, Shutdown drains it.
// Serve it on Server.Listener with an http.Server set up by
// Server.ConfigureHTTP, so that every connection counts against the
// connection limits from accept and none idles short of a WebSocket.
//
// # Guarantees
//
// Once sendMessage has returned a result, every delivery it reports as
// retrying and every message it reports as held is delivered or
// dead-lettered, across crashes: the retry or hold is committed to the
// store (Options.Store, fsync on every commit) before the result is
// written. Delivery is at least once per subscriber; subscribers
// recognise repeats by messageId. The messages one connection publishes
// are written to each subscriber in the order it sent them (order.go);
// a retry or a hold routed again takes no place in that order.
//
// # Reading the source
//
// Server.ServeHTTP accepts a peer (conn.go); its read loop hands each
// request to conn.handle (dispatch.go), itself or, behind a request that
// writes to the cluster, through the connection's in-order goroutine
// (inorder.go); handle looks the method up in the one table of them
// (methods), answers the quick methods itself, checks and routes
// sendMessage itself, and starts its walk there (direct.go: the
// publisher's read loop writes the calls, the subscribers' read loops
// carry the walk on as the answers come, and the one that reads the last
// writes the result), each read loop flushing the connections it wrote
// to once per read (internal/outbound's Batch); a message that may wait
// before its deliveries (an idempotency key, tracing, nobody to route
// to) and the add-ons' methods (bus/admin's dlq.*) run on goroutines
// of their own.
// The router (router.go) gives the topic's chain, newest matching
// subscription first; each routed message takes a ticket per subscriber
// (order.go) as it is routed. walk (propagate.go, walk.go) makes the
// deliveries down the chain until a policy says stop, continueAll
// subscribers without waiting for their answers: it writes the calls to
// this node's connections itself and hands the rest to the delivery
// pipeline (delivery.go: the per-attempt layers, the slow-subscriber
// refusal of limits.go and the activity count of activity.go, the call,
// its timeout and its measure, with the add-ons' middleware around it);
// after the walk it stores the retries it needs.
// The scheduler
// (retry.go) runs stored retries and holds (hold.go) when due, and moves
// exhausted ones to the dead-letter queue (deadletter.go). Bus events go
// out through a queue per subscriber, each in order (events.go). A
// durable subscription (durable_sub.go) stays in the router while its
// owner is away, as a subscriber whose deliveries the walk holds for the
// owner, and one goroutine per returning owner delivers them in order.
// Tool subscriptions (package bus/toolsub, an add-on) take a tool's
// events at a callback (its HTTP path, or the topic callback:{id},
// which the core hands it: doors.go) and publish each on the
// subscription's topic. Each of those steps tells the observers what
// happened to the message (observe.go's observers; the message journal,
// bus/journal, is one), and does nothing when nobody observes. Traces (package
// bus/otel, an add-on) make a publish and each delivery attempt spans,
// through the middleware seams (middleware.go). The operator console is
// an add-on (package bus/console): it reads copies the core makes under
// its own locks (snapshot.go) and hears routed messages as an observer.
// The operator's methods (dlq.*, subscriptions.list and .remove) and GET
// /backup are an add-on too (package bus/admin), through the queue, the
// durable subscriptions and the backup the core exports (admin.go).
//
// # Goroutines and locks
//
// Each connection has a read loop (the request path of internal/rpcstream,
// which reads payloads in place, as the peer sent them; one Server
// goroutine pings every connection, keepalive.go), an in-order goroutine
// while an initialize, subscribe or unsubscribe runs (inorder.go), and one goroutine per
// running sendMessage or dlq.* call (at most Options.MaxInFlight; a
// sendMessage relayed on the read loops, direct.go, has none, and a
// timer per walk for its calls' answers), plus
// one per delivery a walk cannot write without waiting (walk.go: its turn
// has not come, its connection's queue is full, or it goes to another
// node or an away owner). Such a delivery waits for
// its ticket's turn before it is written, holding no lock. Writes to a
// peer are bounded by
// Options.WriteTimeout. The Server has one scheduler goroutine
// (plus up to 64 running attempts) and one event goroutine per
// connection with events waiting. Locks are taken in this order:
// a connection's activity.mu (activity.go, taken only by a delivery's
// track layer, events.countDelivery),
// Server.mu, durables.mu (durable_sub.go), conn.mu, events.mu, router.mu,
// scheduler.mu; a lane's mutex
// (order.go), a walk's mu (walk.go) and the router's route cache's are
// taken alone. clusterState.mu comes before a stand-in's
// mu and router.mu, and a local conn's mu is never held while taking it
// (cluster.go). A conn's mu is its holding's (subscriber.go). None is held across network I/O or a store commit.
// The exception is a tool subscription's order (bus/toolsub), held
// while one of its events is checked, published and, when final,
// removed from the store, so that its events go through one at a time;
// it is taken before any lock of the core. So is an idempotency key's
// lock (Server.keyLocks, internal/keylock), held while its
// request publishes so that requests with one key run one at a time. A
// publisher's order (publish.go) is taken before its conn's mu, as a
// read loop's turn is. The per-identity limits' locks are leaves: the
// publish buckets' (internal/ratelimit) are taken under conn.mu,
// internal/slots' under Server.mu (identity_limits.go); internal/keylock's
// own is taken alone.
//
// Request handlers and retry attempts run under guard and guardAttempt
// (recover.go), which recover a panic so that one request's bug does not
// end every peer's connection. A lock left held by a recovered panic
// would stop the bus instead, so a section that calls anything but
// field reads and writes (router, scheduler, metrics, pattern matching,
// the handshake's commit) releases its lock by defer.
//
// # Clusters
//
// Every Server is a node of a Cluster (seam.go), the way a centrifuge
// Node holds a Broker: the subscription order, client claims, deliveries
// to subscribers on other nodes and membership go through it, on every
// path. Without Options.Cluster the bus is a node on its own, whose
// Cluster orders subscriptions by a counter and owns every client; the
// bus then links no NATS. Package cluster gives one on NATS JetStream
// (cluster.ForBus), which bub serve uses with --cluster-name.
package bus
