// Package bus is the bub-bus server: peers connect over WebSocket, speak
// JSON-RPC 2.0 (docs/PROTOCOL.md), subscribe to topic patterns and publish
// messages, which the bus delivers to subscribers with processMessage and
// acknowledges to the publisher.
//
// Start with Server: New builds one from Options, ServeHTTP serves peers
// and the /healthz, /readyz and /metrics endpoints, Shutdown drains it.
//
// # Reading the source
//
// Server.ServeHTTP accepts a peer (conn.go); its read loop hands each
// request to conn.Handle (dispatch.go), which answers the quick methods
// inline and runs sendMessage off the loop. publish (propagate.go) asks the
// router (router.go) for the topic's chain, newest matching subscription
// first, and calls the delivery pipeline (delivery.go) for each subscriber
// until a policy says stop.
//
// # Goroutines and locks
//
// Each connection has jsonrpc2's read loop, a keepalive pinger, and one
// goroutine per running sendMessage (at most Options.MaxInFlight). Writes
// to a peer are serialized by jsonrpc2 and bounded by
// Options.WriteTimeout. Locks are taken in this order: Server.mu, conn.mu,
// router.mu; none is held across network I/O.
package bus
