package bcp

import (
	"math"
	"sync"
	"testing"
)

func TestBudgetCharge(t *testing.T) {
	type charge struct {
		cat  Category
		cost Bits
		code Code // "" when the charge must succeed
	}
	tests := []struct {
		name    string
		limits  BudgetLimits
		charges []charge
		want    Usage
	}{
		{"bits run out", BudgetLimits{Bits: 100}, []charge{{QuestionAnswer, 55, ""}, {QuestionAnswer, 55, CodeBudgetExhausted}, {Structured, 45, ""}, {Structured, 1, CodeBudgetExhausted}},
			Usage{SpentBits: 100, RemainingBits: 0, Cat2Queries: 1}},
		{"an exact fit is allowed", BudgetLimits{Bits: 671}, []charge{{QuestionAnswer, 671, ""}},
			Usage{SpentBits: 671, Cat2Queries: 1}},
		{"Category-2 count limit", BudgetLimits{Bits: 1000, MaxCat2Queries: 2}, []charge{{QuestionAnswer, 11, ""}, {QuestionAnswer, 11, ""}, {QuestionAnswer, 11, CodeCat2QueriesExhausted}, {Structured, 3, ""}},
			Usage{SpentBits: 25, RemainingBits: 975, Cat2Queries: 2}},
		{"Category-1 does not count against the query limits", BudgetLimits{Bits: 1000, MaxCat2Queries: 1, MaxCat3Queries: 1}, []charge{{Structured, 1, ""}, {Structured, 1, ""}, {Structured, 1, ""}},
			Usage{SpentBits: 3, RemainingBits: 997}},
		{"Category-3 count limit", BudgetLimits{Bits: 10000, MaxCat3Queries: 1}, []charge{{Summary, 1100, ""}, {Summary, 1100, CodeCat3QueriesExhausted}},
			Usage{SpentBits: 1100, RemainingBits: 8900, Cat3Queries: 1}},
		{"category above max_category", BudgetLimits{MaxCategory: 2, Bits: 10000}, []charge{{Summary, 1, CodeCategoryNotAllowed}, {0, 1, CodeCategoryNotAllowed}, {4, 1, CodeCategoryNotAllowed}},
			Usage{RemainingBits: 10000}},
		{"a failed count check charges no bits", BudgetLimits{Bits: 100, MaxCat2Queries: 1}, []charge{{QuestionAnswer, 10, ""}, {QuestionAnswer, 10, CodeCat2QueriesExhausted}},
			Usage{SpentBits: 10, RemainingBits: 90, Cat2Queries: 1}},
		{"a failed bits check counts no query", BudgetLimits{Bits: 10, MaxCat2Queries: 5}, []charge{{QuestionAnswer, 11, CodeBudgetExhausted}},
			Usage{RemainingBits: 10}},
		{"invalid costs", BudgetLimits{Bits: 10}, []charge{{Structured, -1, CodeInvalidValue}, {Structured, Bits(math.NaN()), CodeInvalidValue}, {Structured, Bits(math.Inf(1)), CodeInvalidValue}},
			Usage{RemainingBits: 10}},
		{"free queries pass a zero budget", BudgetLimits{}, []charge{{Structured, 0, ""}, {Structured, 1, CodeBudgetExhausted}},
			Usage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget(tt.limits)
			for i, c := range tt.charges {
				err := b.Charge(c.cat, c.cost)
				if CodeOf(err) != c.code {
					t.Fatalf("charge %d: got %v, want code %q", i, err, c.code)
				}
			}
			if got := b.Usage(); got != tt.want {
				t.Errorf("usage = %+v, want %+v", got, tt.want)
			}
			b.Reset()
			if got := b.Usage(); got.SpentBits != 0 || got.Cat2Queries != 0 || got.Cat3Queries != 0 {
				t.Errorf("after Reset usage = %+v", got)
			}
		})
	}
}

func TestBudgetFractionalCostsSumToExactBudget(t *testing.T) {
	// Three 3-value enums cost 3·log2(3); a budget of exactly that must
	// take all three despite float rounding.
	cost := Bits(math.Log2(3))
	b := NewBudget(BudgetLimits{Bits: Bits(3 * math.Log2(3))})
	for i := 0; i < 3; i++ {
		if err := b.Charge(Structured, cost); err != nil {
			t.Fatalf("charge %d: %v", i, err)
		}
	}
}

// TestBudgetConcurrentCharges races many charges against one budget: the
// check and the charge are one step, so exactly the charges that fit pass.
func TestBudgetConcurrentCharges(t *testing.T) {
	b := NewBudget(BudgetLimits{Bits: 550, MaxCat2Queries: 7})
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Charge(QuestionAnswer, 55) == nil {
				mu.Lock()
				passed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if u := b.Usage(); passed != 7 || u.Cat2Queries != 7 || u.SpentBits != 385 {
		t.Errorf("passed %d, usage %+v; want 7 queries, 385 bits", passed, u)
	}
}

func TestTaint(t *testing.T) {
	steps := map[Taint]Taint{TaintHigh: TaintMedium, TaintMedium: TaintLow, TaintLow: TaintLow, 0: TaintMedium}
	for from, want := range steps {
		if got := from.StepDown(); got != want {
			t.Errorf("%v.StepDown() = %v, want %v", from, got, want)
		}
	}
	for _, name := range []string{"low", "medium", "high"} {
		tt, err := ParseTaint(name)
		if err != nil || tt.String() != name {
			t.Errorf("ParseTaint(%q) = %v, %v", name, tt, err)
		}
		text, err := tt.MarshalText()
		var back Taint
		if err != nil || back.UnmarshalText(text) != nil || back != tt {
			t.Errorf("text round trip of %v: %q %v %v", tt, text, err, back)
		}
	}
	if _, err := ParseTaint("HIGH"); CodeOf(err) != CodeInvalidValue {
		t.Errorf("ParseTaint(HIGH) = %v", err)
	}
	if _, err := Taint(0).MarshalText(); err == nil {
		t.Error("the zero Taint marshals")
	}
}

// A restored account enforces its limits from where the stored usage left
// off: a gateway restart must not hand a channel its budget back.
func TestRestoreBudget(t *testing.T) {
	limits := BudgetLimits{MaxCategory: QuestionAnswer, Bits: 100, MaxCat2Queries: 2}
	b := RestoreBudget(limits, Usage{SpentBits: 90, Cat2Queries: 1, RemainingBits: 1e9})
	if got := b.Usage(); got.SpentBits != 90 || got.RemainingBits != 10 || got.Cat2Queries != 1 {
		t.Fatalf("restored usage = %+v, want spent 90, remaining 10, cat2 1", got)
	}
	if err := b.Charge(Structured, 11); CodeOf(err) != CodeBudgetExhausted {
		t.Fatalf("charge of 11 bits with 10 left: err = %v, want budget_exhausted", err)
	}
	if err := b.Charge(QuestionAnswer, 5); err != nil {
		t.Fatalf("second Category-2 charge: %v", err)
	}
	if err := b.Charge(QuestionAnswer, 1); CodeOf(err) != CodeCat2QueriesExhausted {
		t.Fatalf("third Category-2 charge: err = %v, want cat2_queries_exhausted", err)
	}
}
