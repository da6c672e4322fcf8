// Package gateway runs BCP on the bus: a peer through which a Controller
// (an untainted agent) queries a Reader (a tainted agent), and through
// which nothing unvalidated ever reaches a Controller.
//
// The gateway subscribes to bcp:query (Controllers' requests and session
// starts) and bcp:response (Readers' answers and publishes), and publishes
// to agent:{name}. It trusts only the from the bus attests, which the
// bus's permissions tie to a credential (docs/SECURITY.md): the bus, not
// this package, keeps a Reader from publishing to agent:{controller}.
// Every answer is validated and normalized by package bcp before the
// Controller gets it, and every step is charged and audited.
//
// Its state (pending queries, budgets spent, messages not yet handed to
// the bus, the audit log) lives in a bbolt file in its data directory,
// and every handler changes it in one transaction together with the
// messages it will send, so that a restart loses nothing and a redelivered
// message charges nothing twice.
//
// The wire contract, with an example per message, is in docs/BCP.md.
package gateway
