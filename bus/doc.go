// Package bus is the bub-bus server: peers connect over WebSocket, speak
// JSON-RPC 2.0 (docs/PROTOCOL.md), subscribe to topic patterns and publish
// messages, which the bus delivers to subscribers with processMessage and
// acknowledges to the publisher.
//
// Start with Server: New builds one from Options, ServeHTTP serves peers
// and the /healthz, /readyz and /metrics endpoints, Shutdown drains it.
//
// # Guarantees
//
// Once sendMessage has returned a result, every delivery it reports as
// retrying and every message it reports as held is delivered or
// dead-lettered, across crashes: the retry or hold is committed to the
// store (Options.Store, fsync on every commit) before the result is
// written. Delivery is at least once per subscriber; order is not
// guaranteed once retries happen. Subscribers recognise repeats by
// messageId.
//
// # Reading the source
//
// Server.ServeHTTP accepts a peer (conn.go); its read loop hands each
// request to conn.handle (dispatch.go), which answers the quick methods
// inline and runs sendMessage and the dlq.* methods (admin.go) off the
// loop. publish and pass (propagate.go) ask the router (router.go) for the
// topic's chain, newest matching subscription first, and call the
// delivery pipeline (delivery.go) for each subscriber until a policy says
// stop; after the pass they store the retries it needs. The scheduler
// (retry.go) runs stored retries and holds (hold.go) when due, and moves
// exhausted ones to the dead-letter queue (deadletter.go). Bus events go
// out through a queue per subscriber, each in order (events.go).
//
// # Goroutines and locks
//
// Each connection has a read loop (the request path of internal/rpcstream,
// which leaves payloads as the peer sent them; one Server goroutine pings
// every connection, keepalive.go), and one
// goroutine per running sendMessage or dlq.* call (at most
// Options.MaxInFlight). Writes to a peer are bounded by
// Options.WriteTimeout. The Server has one scheduler goroutine
// (plus up to 64 running attempts) and one event goroutine per
// connection with events waiting. Locks are taken in this order:
// Server.mu, conn.mu, events.mu, router.mu, scheduler.mu; none is held
// across network I/O or a store commit.
package bus
