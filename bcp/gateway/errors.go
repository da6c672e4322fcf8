package gateway

// Codes a gateway refuses with. A refusal is a non-processed ack whose
// message starts with the code and a colon, so that a shell agent can
// switch on it; bcp_validation_result and bcp_query_failed carry it in
// their code field. Budget codes (budget_exhausted, cat2_queries_exhausted,
// category_not_allowed, ...) and validation codes (too_many_words, ...)
// are package bcp's.
const (
	// CodeMalformed: the payload is not a message of the type it claims,
	// or not of a type the topic carries.
	CodeMalformed = "malformed"
	// CodeNoChannel: the sender has no channel of the role it acts in to
	// the agent it names.
	CodeNoChannel = "no_channel"
	// CodeInvalidSpec: the query's spec breaks a rule of docs/BCP.md
	// section 1; the detail names the rule's code and path.
	CodeInvalidSpec = "invalid_spec"
	// CodeApprovalUnavailable: a Category-3 query needs two human
	// decisions, and this gateway has no approval flow; it refuses rather
	// than deliver a summary no human has read.
	CodeApprovalUnavailable = "approval_unavailable"
	// CodeUnknownQuery: the sender has no query of that id: none exists,
	// or it was sent to another Reader (the two are one answer).
	CodeUnknownQuery = "unknown_query"
	// CodeNotYourQuery is the audit log's outcome of an answer to a query
	// sent to another Reader; the Reader itself hears CodeUnknownQuery.
	CodeNotYourQuery = "not_your_query"
	// CodeQueryClosed: the query was already answered, failed or expired.
	CodeQueryClosed = "query_closed"
	// CodeExpired: the query's time ran out before a valid answer came.
	CodeExpired = "expired"
	// CodeValidationFailed: every allowed answer was invalid.
	CodeValidationFailed = "validation_failed"
	// CodeControllerUnavailable: the bus could neither route nor hold a
	// push's delivery to agent:{controller} (bcp-subscriptions.md: "the
	// Controller session could not be started"). An absent Controller is
	// not unavailable: the bus holds agent:* for it. Sent to the Reader
	// as its bcp_validation_result, after the publish's ack.
	CodeControllerUnavailable = "controller_unavailable"
	// CodeInternal: the gateway could not record the step (a storage
	// error); the sender may retry.
	CodeInternal = "internal"
)
