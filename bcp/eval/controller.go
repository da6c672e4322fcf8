package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bub-bus/bub/bcp"
)

// Answer is a validated response as a plan reads it: field or question
// id → value (booleans and integers in their JSON form).
type Answer map[string]string

// query is one query a plan sends.
type query struct {
	spec          *bcp.Spec
	justification string // Category 3 only
}

// reply is everything the Controller observes of one query's outcome:
// what the covert decoder reads.
type reply struct {
	Answer Answer
	// Raw is the response as delivered, bytes in the order received.
	Raw       json.RawMessage
	Anomalies []bcp.Anomaly
	// Failed is the code when no answer came.
	Failed string
	// Refused is set when the gateway refused the query itself: the
	// Reader never saw it.
	Refused bool
	// Bits is the bandwidth_bits of the delivery.
	Bits float64
	// Latency is from sending the query to its outcome arriving.
	Latency time.Duration
	// Arrival is the outcome's place among the run's arrivals, from 0.
	Arrival int
}

// asker answers a plan's queries: through the gateway, in a simulation,
// or, for the baseline, from the Reader's free text.
type asker interface {
	// ask sends qs at once and returns their outcomes in qs's order. An
	// error is the harness's own failure, not the query's.
	ask(c *Ctx, qs []query) ([]reply, error)
}

// Ctx is what a plan runs with: the environment, the tools, and the
// asker. It records every query and outcome for the report.
type Ctx struct {
	// ctx is the harness's context, which ends every wait of the run.
	ctx   context.Context
	Env   *Env
	tools map[string]Tool
	asker asker
	// queries and replies are the run's, in order.
	queries []query
	replies []reply
}

// Ask sends a Category-1 or -2 query and returns the validated answer.
func (c *Ctx) Ask(spec *bcp.Spec) (Answer, error) {
	as, err := c.AskAll(spec)
	if err != nil {
		return nil, err
	}
	return as[0], nil
}

// AskAll sends independent queries at once and returns their answers in
// order; the first unanswered one is a *QueryError.
func (c *Ctx) AskAll(specs ...*bcp.Spec) ([]Answer, error) {
	qs := make([]query, len(specs))
	for i, s := range specs {
		qs[i] = query{spec: s}
	}
	return c.send(qs)
}

// Escalate sends a Category-3 query with the Controller's justification
// (why Categories 1 and 2 will not do) and returns the approved summary.
func (c *Ctx) Escalate(spec *bcp.Spec, justification string) (string, error) {
	as, err := c.send([]query{{spec: spec, justification: justification}})
	if err != nil {
		return "", err
	}
	return as[0]["summary"], nil
}

func (c *Ctx) send(qs []query) ([]Answer, error) {
	rs, err := c.asker.ask(c, qs)
	if err != nil {
		return nil, err
	}
	c.queries = append(c.queries, qs...)
	c.replies = append(c.replies, rs...)
	out := make([]Answer, len(rs))
	for i, r := range rs {
		if r.Failed != "" {
			return nil, &QueryError{Code: r.Failed}
		}
		out[i] = r.Answer
	}
	return out, nil
}

// Do calls a tool of the suite.
func (c *Ctx) Do(tool string, args map[string]string) {
	t, ok := c.tools[tool]
	if !ok {
		panic(fmt.Sprintf("eval: plan calls unknown tool %q", tool))
	}
	t(c.Env, args)
}

// answerOf reads a delivered response into an Answer.
func answerOf(raw json.RawMessage) (Answer, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("response %s: %w", raw, err)
	}
	a := Answer{}
	for k, v := range m {
		switch v := v.(type) {
		case string:
			a[k] = v
		case bool:
			a[k] = strconv.FormatBool(v)
		case float64:
			a[k] = strconv.FormatInt(int64(v), 10)
		default:
			return nil, fmt.Errorf("response %s: %s is not a primitive", raw, k)
		}
	}
	return a, nil
}

// runPlan runs t's plan on c and reports whether it ended without an
// unanswered query; any other error is the harness's.
func runPlan(t *UserTask, c *Ctx) (queryFailure string, err error) {
	err = t.Plan(c)
	var qe *QueryError
	if errors.As(err, &qe) {
		return qe.Code, nil
	}
	return "", err
}
