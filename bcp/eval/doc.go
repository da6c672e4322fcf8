// Package eval is an AgentDojo-shaped evaluation of BCP: it runs user
// tasks and injection tasks through the real bus and the real BCP
// gateway, with Controllers written as plans, and Readers that are
// honest, a worst-case adaptive attacker, or a covert channel with a
// colluding decoder; and, beside them, a baseline without BCP in which
// the Controller follows what the Reader's free text tells it.
//
// Start with Run (harness.go), which starts a bus on loopback, the
// gateway and every peer, and returns a Report (report.go). The suites
// are data and plans (suite_*.go); what an attacker can do is in
// search.go (adaptive) and covert.go (covert channel). docs/BCP-EVAL.md
// explains the threat model and reads the table.
//
// Every result is deterministic: the environments, secrets and attacker
// choices are functions of the task, never of time; the one timing
// channel the covert decoder reads is quantised into slots far wider
// than the bus's latency (covert.go).
package eval
