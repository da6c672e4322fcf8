// Package a2a serves the bus's agents to the outside as A2A 1.0 agents
// (the Agent2Agent protocol, a2a-protocol.org): each configured Agent gets
// a base URL /a2a/{agent}/ with its agent card at
// /a2a/{agent}/.well-known/agent-card.json, a catalog of every card at
// /a2a/.well-known/agent-cards.json, and the JSON-RPC binding (SendMessage,
// SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask
// and the four push notification config methods) at the base URL itself.
// Push notifications go out through the bus's signed webhooks (push.go;
// VerifyPush checks one); a cluster's servers answer
// PushNotificationNotSupportedError, since a cluster keeps no webhook
// subscriptions.
//
// Start with New, which connects to the bus and returns a Server, an
// http.Handler to mount beside the bus's own (bub serve does so with
// --a2a-config).
//
// # An add-on, a peer
//
// The bus knows nothing of A2A. A Server is an ordinary peer of the bus:
// it dials the bus's WebSocket door with each agent's identity and
// credential, and every message it publishes goes through the bus's one
// publish path, so grants, quotas, ordering, holds, retries, the journal
// and dead letters apply to it as to any peer. An A2A SendMessage becomes
// one bus message on the agent's topic (see Payload); the agent's answer
// on outbound:a2a-{taskId} becomes the task's status, history and
// artifacts. An agent that knows nothing of A2A (examples/echo-agent)
// completes a task with its ordinary plaintext_message reply.
//
// # Durability
//
// Tasks, their event logs and idempotency records live in a bbolt file
// (Options.Path), fsynced at each commit, so a task survives kill -9 of
// the process. They are kept for Options.Retention after their last
// change, then deleted. On a cluster (Options.JetStream) they are in the
// replicated stream BUB_A2A instead, shared by every node's server
// (store_jetstream.go; docs/A2A.md, "Cluster").
//
// # Extensions
//
// Two declared extensions answer open A2A requests: resumable streams
// (every SSE event has the task's sequence number as its id, and a
// request with Last-Event-ID gets exactly the events after it; A2A
// #1986) and idempotent sends (a SendMessage repeated with the same
// messageId, or Idempotency-Key header, within the retention window gets
// the first task back and publishes nothing; A2A #1987). docs/A2A.md
// describes both, and what is not done yet.
package a2a
