// Package auth gives the bus identities and permissions: it checks the
// credential a peer presents (a static token whose SHA-256 the operator
// configured, or an Ed25519-signed JWT from a configured issuer), and
// answers what the peer may do: which clientIds it may initialize as,
// which topics it may publish to and subscribe to, and whether it may
// call the dlq.* methods or hold a fallback subscription.
//
// The threat model, the rules and the configuration are in
// docs/SECURITY.md.
package auth
