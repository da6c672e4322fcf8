// Package auth gives the bus identities and permissions: it checks the
// credential a peer presents (a static token whose SHA-256 the operator
// configured, or an Ed25519-signed JWT from a configured issuer), and
// answers what the peer may do: which clientIds it may initialize as,
// which topics it may publish to and subscribe to, and whether it may
// call the dlq.* methods or hold a fallback subscription.
//
// Start at New, which compiles a Config; Authenticator.Authenticate turns
// a token into a Principal; Principal.Bind turns it, once the clientId is
// known, into the Access the bus consults on every call.
//
// # Intersection
//
// A Principal is a list of grants that must all allow: a static identity
// or anonymous access has one, a JWT two (its "bub" claims and its
// issuer's ceiling). So a token is allowed exactly what both its claims
// and the ceiling allow. admin and fallback hold when every grant sets
// them; publish_only, a restriction, when any does. A JWT may initialize
// only as its sub.
//
// # Subscriptions and containment
//
// A subscription is allowed when, in every grant, an allow pattern covers
// it (matches every topic it could match) and no deny pattern overlaps it
// (could match a topic it matches). Both are decided by simple,
// conservative rules that refuse when unsure; see CanSubscribe and
// docs/SECURITY.md.
//
// # system: topics
//
// Topics in system: need an allow pattern that itself starts with
// "system:": a broad "*" grants no system: topic. The bus's own events
// (protocol.BusOwnedTopic) can never be published by a peer.
//
// The threat model, the rules and the configuration are in
// docs/SECURITY.md.
package auth
