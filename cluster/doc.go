// Package cluster is the part of a bus cluster that talks to NATS: it
// starts an embedded nats-server with JetStream (or connects to an
// operator's NATS cluster), keeps the node's heartbeat, and gives the bus
// the few primitives docs/CLUSTER.md builds on:
//
//   - one subscription order: [Node.PutSubscription] and
//     [Node.DeleteSubscription] write to the replicated bucket BUB_SUBS;
//     every node applies its changes in revision order through
//     [Handler.ApplySubscription], and [Node.Sync] waits until every live
//     node has applied a revision;
//   - client ownership: [Node.ClaimClient] writes BUB_CLIENTS, and
//     [Handler.TakenOver] hears when another connection took the clientId;
//   - liveness: [Node.Live] and [Node.Acting], and [Handler.NodeDown]
//     when a node stops heartbeating; the acting node then deletes the
//     dead node's subscriptions and claims;
//   - remote delivery: [Node.Deliver] asks another node to deliver a
//     message, which that node's [Handler.Deliver] does;
//   - idempotency keys: [Store.ReserveIdempotent] and
//     [Store.PutIdempotent] keep the first answer to a publish with a key
//     in the bucket BUB_IDEMPOTENCY, each with a TTL, for every node
//     (idempotency.go).
//
// Start with [Start]; end with [Node.Close]. A bus uses a node through
// [ForBus], which gives it as a bus.Cluster (bus.Options.Cluster).
//
// # Guarantees and limits
//
// A write (subscription, claim) returns once JetStream has it on a
// majority of the bucket's replicas. Liveness is judged by each node from
// when it received heartbeats, on its own monotonic clock, never from
// timestamps written by another host, so clock skew between hosts cannot
// make a healthy node look dead; a node that stalls longer than the node
// timeout (a long GC pause, a partition) is presumed dead and its
// subscriptions leave the order, and it must subscribe them again.
//
// # Goroutines
//
// A Node runs, each counted so that Close waits for it:
//   - one goroutine per watched bucket (subscriptions, clients, nodes);
//   - one heartbeat loop (heartbeats are core NATS messages, so a
//     JetStream leader election does not delay them);
//   - one loop that removes old delete markers from the buckets;
//   - for remote deliveries: per sending connection with requests queued,
//     one goroutine that hands them on in order, and one per delivery
//     being handled;
//   - per node that dies: one that handles the death, which starts one
//     that restarts the watches and, on the acting node, one that removes
//     the dead node's keys.
//
// Besides these run the embedded server's and the NATS client's own; the
// count of pending entries runs on the client's. Close ends them all.
// While Start waits for JetStream, one more goroutine says every 10 s
// what it waits for; it ends with Start. The node as the bus uses it
// makes some removals off the bus's path, one goroutine each, and waits
// for them when it leaves.
//
// # Operating it
//
// Start locks StoreDir (ErrStoreLocked for a second node on it), fails
// at once when the embedded server cannot bind a listener, and gives up
// when its ctx ends. A node that hears fewer than a majority of the
// nodes refuses its writes and Ready with ErrNoQuorum. The embedded
// server's failed route connections are logged once when a route is
// lost and then every 30 s while it stays unreachable.
package cluster
