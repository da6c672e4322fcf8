// Package mcp serves the bus to MCP (Model Context Protocol) clients:
// desktop assistants and LLM applications that reach the outside world
// through MCP tools and resources. bub mcp runs it over stdio or
// Streamable HTTP.
//
// Start with NewServer, which wraps a peer.Conn the caller has dialled:
// the server acts as that connection's identity, with its credential's
// grants and nothing more. It offers the tools send_message,
// wait_for_message, list_dead_letters, replay_dead_letter, bcp_query and
// bcp_respond, and each topic pattern as a resource, bub://topic/{pattern},
// whose subscribers get a notifications/resources/updated for every
// message the pattern receives.
//
// # Untrusted data
//
// Everything another peer wrote (payloads, meta, the messages of acks,
// the errors of dead letters) reaches the assistant as data, never as
// instructions: structured results carry it under an "untrusted" key, and
// text results wrap it in <untrusted-data> ... </untrusted-data>, whose
// JSON is encoded with <, > and & escaped so that no payload can close the
// block early. The tool descriptions tell the model so.
//
// # Watching patterns
//
// The first wait_for_message, read or subscription of a pattern subscribes
// it on the bus (policy continueAll, so that older subscriptions of other
// patterns still get every message) for the life of the server. An older
// subscription of the identical pattern string is replaced in routing,
// as the bus's last-match-wins rule says (docs/PROTOCOL.md). Each delivery is answered
// processed and kept in the pattern's log, the newest Options.History of
// them; wait_for_message returns the oldest one no earlier call returned.
package mcp
