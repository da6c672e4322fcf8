package eval

import "errors"

// QueryError is a query the Controller got no answer to: the gateway
// refused it (budget_exhausted, category_not_allowed, ...) or it failed
// (validation_failed, approval_rejected, expired). A plan gives up on it:
// a Controller never escalates on its own.
type QueryError struct{ Code string }

// Error says which code left the query unanswered.
func (e *QueryError) Error() string { return "query not answered: " + e.Code }

// errNeedAnswer stops a simulated plan at the first query its script
// does not answer.
var errNeedAnswer = errors.New("eval: the simulation's script has no answer for this query")
