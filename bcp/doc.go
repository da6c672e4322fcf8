// Package bcp implements the Bandwidth-Constrained Protocol: the query specs
// a Controller (an untainted agent) sends to a Reader (a tainted agent), the
// deterministic validation and normalization of the Reader's answers, the
// bandwidth accounting that bounds how much a Reader can say, and the agent
// definitions that declare channels and subscriptions.
//
// The validator is the trust boundary: a Controller must only ever see the
// normalized output of [Spec.Validate]. The package therefore decodes
// strictly (unknown keys, duplicate keys and wrong JSON types are errors),
// never panics on any input, and performs no I/O except [LoadDefinitions]
// reading a directory of definition files.
//
// # Where to start
//
//   - [ParseSpec] decodes a query or subscription spec (Category 1, 2 or 3);
//     [Spec.Cost] is its declared bandwidth, known before the query is sent.
//   - [Spec.Validate] checks a Reader's response and returns a [Result] with
//     the normalized JSON, the declared and measured bits and the anomalies.
//   - [Budget] charges a channel's bit budget and query limits atomically.
//   - [LoadDefinitions] loads and cross-checks a directory of agent
//     definitions; [NewRegistry] indexes their subscriptions by (reader,
//     controller, subscription id).
//   - [Taint.StepDown] is the taint a validated response carries.
//
// Every rejection is an [*Error] with a stable [Code], a path such as
// questions[2].expected_format and, for definitions, the file and line.
// docs/BCP.md lists every rule, code and formula.
//
// # Caveats
//
// Anomaly detection is a heuristic: it flags (or, with [RejectAnomalies],
// rejects) instruction-like text, URLs, code and invisible characters,
// but it cannot prove an answer harmless. The structural limits
// (categories, word and character caps, budgets) are the defence; a word
// of two scripts is refused outright, and Category 3 summaries always
// require human approval. [Result.Evidence] (which invisible characters
// an answer held) is for audit logs: a Controller must never see it.
//
// All types are safe to share between goroutines once built, except that a
// Spec or Definition must not be modified while another goroutine uses it.
// [Budget] and [Registry] are safe for concurrent use.
package bcp
