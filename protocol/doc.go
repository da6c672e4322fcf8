// Package protocol holds the wire vocabulary of bub-bus, shared by the bus
// (package bus) and its clients (package peer): JSON-RPC method names,
// their params and results, the error code table, propagation policies,
// and the topic and pattern grammar.
//
// The package does no I/O. docs/PROTOCOL.md is the normative description
// of everything here, with a wire example for every method and code.
package protocol
