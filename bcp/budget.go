package bcp

import (
	"fmt"
	"math"
	"sync"
)

// budgetSlack absorbs float rounding: fractional costs summed in another
// order must not turn an exactly-spent budget into an exhausted one.
const budgetSlack = 1e-9

// BudgetLimits are a channel's limits, from its definition.
type BudgetLimits struct {
	// MaxCategory is the highest category the channel allows; 0 means 3.
	MaxCategory Category
	// Bits is the channel's bit budget. 0 allows only free (0-bit) queries.
	Bits Bits
	// MaxCat2Queries and MaxCat3Queries cap how many queries or publishes
	// of those categories are charged; 0 means only the bit budget limits
	// them. Category 1 never counts against them.
	MaxCat2Queries int
	MaxCat3Queries int
}

// Usage is what a budget has charged so far.
type Usage struct {
	SpentBits     Bits `json:"spent_bits"`
	RemainingBits Bits `json:"remaining_bits"`
	Cat2Queries   int  `json:"cat2_queries"`
	Cat3Queries   int  `json:"cat3_queries"`
}

// Budget is one channel's running account, shared by the Controller's
// queries and the Reader's subscription publishes. It is safe for
// concurrent use: Charge checks every limit and charges under one lock, so
// two racing queries can never both pass a check that only one fits.
type Budget struct {
	limits BudgetLimits

	mu    sync.Mutex // guards the fields below
	spent Bits
	cat2  int
	cat3  int
}

// NewBudget returns an empty account with the given limits.
func NewBudget(limits BudgetLimits) *Budget {
	if limits.MaxCategory == 0 {
		limits.MaxCategory = Summary
	}
	return &Budget{limits: limits}
}

// Charge accounts one query or publish of the given category and declared
// cost (normally [Spec.Cost], charged before the query is sent). It either
// charges everything or, returning an [*Error] with code
// category_not_allowed, cat2_queries_exhausted, cat3_queries_exhausted or
// budget_exhausted, changes nothing.
func (b *Budget) Charge(c Category, cost Bits) error {
	if math.IsNaN(float64(cost)) || cost < 0 || math.IsInf(float64(cost), 0) {
		return newError(CodeInvalidValue, "", fmt.Sprintf("cost must be a finite non-negative number of bits, not %v", float64(cost)))
	}
	if c < Structured || c > b.limits.MaxCategory {
		return newError(CodeCategoryNotAllowed, "", fmt.Sprintf("category %d is above the channel's max_category %d", c, b.limits.MaxCategory))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c == QuestionAnswer && b.limits.MaxCat2Queries > 0 && b.cat2 >= b.limits.MaxCat2Queries {
		return newError(CodeCat2QueriesExhausted, "", fmt.Sprintf("all %d Category-2 queries of the channel are used", b.limits.MaxCat2Queries))
	}
	if c == Summary && b.limits.MaxCat3Queries > 0 && b.cat3 >= b.limits.MaxCat3Queries {
		return newError(CodeCat3QueriesExhausted, "", fmt.Sprintf("all %d Category-3 queries of the channel are used", b.limits.MaxCat3Queries))
	}
	if b.spent+cost > b.limits.Bits+budgetSlack {
		return newError(CodeBudgetExhausted, "", fmt.Sprintf("%.1f bits requested, %.1f of %.1f left", float64(cost), float64(b.limits.Bits-b.spent), float64(b.limits.Bits)))
	}
	b.spent += cost
	switch c {
	case QuestionAnswer:
		b.cat2++
	case Summary:
		b.cat3++
	}
	return nil
}

// Usage returns a snapshot of the account.
func (b *Budget) Usage() Usage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Usage{
		SpentBits:     b.spent,
		RemainingBits: max(b.limits.Bits-b.spent, 0),
		Cat2Queries:   b.cat2,
		Cat3Queries:   b.cat3,
	}
}

// Reset empties the account. Budgets are per Controller session in the
// subscriptions spec, so a gateway resets when a session starts.
func (b *Budget) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spent, b.cat2, b.cat3 = 0, 0, 0
}

// RestoreBudget returns an account with the given limits that has already
// charged used, as read back from durable storage: a gateway that restarts
// must go on from what it spent, not from zero. used.RemainingBits is
// ignored; it follows from the limits.
func RestoreBudget(limits BudgetLimits, used Usage) *Budget {
	b := NewBudget(limits)
	b.spent, b.cat2, b.cat3 = used.SpentBits, used.Cat2Queries, used.Cat3Queries
	return b
}
