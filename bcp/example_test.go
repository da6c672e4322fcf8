package bcp_test

import (
	"fmt"

	"github.com/bub-bus/bub/bcp"
)

// A Controller's query, its cost charged up front, and a Reader's answer
// validated and normalized before the Controller sees it.
func Example() {
	spec, err := bcp.ParseSpec([]byte(`{
		"category": 2,
		"questions": [
			{"id": "sender", "question": "Who sent the email?", "max_words": 3, "expected_format": "person_name"},
			{"id": "date", "question": "When is the meeting?", "max_words": 1, "expected_format": "date"}
		]
	}`))
	if err != nil {
		panic(err)
	}
	budget := bcp.NewBudget(bcp.BudgetLimits{MaxCategory: 2, Bits: 60})
	if err := budget.Charge(spec.Category, spec.Cost()); err != nil {
		panic(err)
	}
	res, err := spec.Validate([]byte(`{"date": "2024-03-15", "sender": "  Jane\u200b SMITH "}`), bcp.ValidateOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(res.Response))
	fmt.Println(res.DeclaredBits, "declared,", res.MeasuredBits, "measured")
	for _, a := range res.Anomalies {
		fmt.Println(a.Question, a.Kind) // all a Controller may see
	}
	for _, e := range res.Evidence {
		fmt.Println("audit only:", e.Question, e.Detail)
	}
	fmt.Println(budget.Charge(spec.Category, spec.Cost()))
	// Output:
	// {"sender":"jane smith","date":"2024-03-15"}
	// 44.0 bits declared, 33.0 bits measured
	// sender invisible
	// audit only: sender U+200B
	// 44.0 bits requested, 16.0 of 60.0 left (budget_exhausted)
}

func ExampleSpec_Validate_rejection() {
	spec, _ := bcp.ParseSpec([]byte(`{"category": 1, "fields": [
		{"name": "priority", "type": "enum", "values": ["low", "medium", "high", "critical"]}]}`))
	_, err := spec.Validate([]byte(`{"priority": "urgent"}`), bcp.ValidateOptions{})
	fmt.Println(bcp.CodeOf(err))
	fmt.Println(err)
	// Output:
	// not_in_enum
	// priority: must be one of "low", "medium", "high", "critical" (not_in_enum)
}
