package protocol

// Policy is a subscription's propagation policy: after its subscriber
// answers, it decides whether the message goes on to the next subscriber
// in the routing chain.
type Policy string

// The propagation policies.
const (
	// PolicyStopOnProcessed stops when the subscriber processed the
	// message or asked to stop. The default.
	PolicyStopOnProcessed Policy = "stopPropagationOnProcessed"
	// PolicyStopOnStop stops only when the subscriber asked to stop.
	PolicyStopOnStop Policy = "stopPropagationOnStop"
	// PolicyContinueAll never stops.
	PolicyContinueAll Policy = "continueAll"
)

// Policies lists every policy, in documentation order.
var Policies = []Policy{PolicyStopOnProcessed, PolicyStopOnStop, PolicyContinueAll}

// Valid reports whether p names a policy.
func (p Policy) Valid() bool {
	switch p {
	case PolicyStopOnProcessed, PolicyStopOnStop, PolicyContinueAll:
		return true
	}
	return false
}

// Stops reports whether propagation stops after a subscriber under policy p
// answered with processed and stop (its processed/success and
// stopPropagation fields).
func (p Policy) Stops(processed, stop bool) bool {
	switch p {
	case PolicyStopOnProcessed:
		return processed || stop
	case PolicyStopOnStop:
		return stop
	}
	return false
}

// MayStop reports whether propagation can stop after a subscriber under
// policy p, by some answer of Stops: false for continueAll, whose answer
// a walk need not wait for before going on.
func (p Policy) MayStop() bool {
	return p.Stops(true, true)
}
