// Package agent is the Go SDK for BCP agents: a Controller that asks
// Readers through the gateway (package gateway) and handles the validated
// answers, and a Reader that handles queries, answers them and publishes
// against its active subscriptions.
//
// Both sit on a peer.Conn the agent already has; the gateway and the
// bus's permissions do the enforcing, so nothing here is a security
// boundary. Subscribe the value of Controller.Handler or Reader.Handler
// to the agent's own topic, agent:{clientId}.
package agent
