package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// onResponse handles bcp:response: Readers' answers and publishes.
func (g *Gateway) onResponse(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	return g.handleEnvelope(d, func(t *txn) (ack, error) {
		rec := AuditRecord{Event: "response", From: d.From, Reader: d.From}
		if d.Type() != TypeResponse {
			return refuse(t, rec, CodeMalformed, fmt.Sprintf("bcp:response carries %s, not %q", TypeResponse, truncate(d.Type())))
		}
		r, err := DecodeResponse(d.Payload)
		if err != nil {
			return refuse(t, rec, codeOf(err), detailOf(err))
		}
		if r.SubscriptionID != "" {
			return g.publish(t, d.From, d.MessageID, r)
		}
		return g.answer(t, d.From, r)
	})
}

// answer handles a Reader's answer to a query.
func (g *Gateway) answer(t *txn, from string, r *Response) (ack, error) {
	rec := AuditRecord{Event: "response", From: from, Reader: from, QueryID: r.QueryID}
	q, err := t.query(r.QueryID)
	if err != nil {
		return ack{}, err
	}
	// A query sent to another Reader gets the very answer of one that
	// does not exist: a Reader learns nothing of queries not its own.
	unknown := fmt.Sprintf("you have no query %q", truncate(r.QueryID))
	if q == nil {
		return refuse(t, rec, CodeUnknownQuery, unknown)
	}
	if from != q.Reader {
		// Audited as what it is, with the true sender: a Reader probing
		// other Readers' queries is what an operator wants to see.
		rec.Controller, rec.Category, rec.DeclaredBits = q.Controller, q.Spec.Category, q.Cost
		_, err := refuse(t, rec, CodeNotYourQuery, fmt.Sprintf("query %s was sent to %s, not to %s", q.ID, q.Reader, truncate(from)))
		return refused(CodeUnknownQuery, unknown), err
	}
	rec.Controller, rec.Category, rec.DeclaredBits = q.Controller, q.Spec.Category, q.Cost
	if q.State != statePending {
		return refuse(t, rec, CodeQueryClosed, fmt.Sprintf("query %s is %s", q.ID, q.State))
	}
	if !t.now.Before(q.ExpiresAt) {
		if err := g.fail(t, q, CodeExpired); err != nil {
			return ack{}, err
		}
		return refuse(t, rec, CodeExpired, fmt.Sprintf("query %s expired at %s", q.ID, q.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z")))
	}
	var opts bcp.ValidateOptions
	if ch := g.controllerChannel(q.Controller, q.Reader); ch != nil {
		opts = ch.ValidateOptions()
	}
	q.Attempts++
	res, verr := q.Spec.Validate(r.Response, opts)
	if verr != nil {
		code := codeOf(verr)
		t.onCommit(func(m *metrics) { m.validations.WithLabelValues("rejected", code).Inc() })
		left := g.opts.MaxAttempts - q.Attempts
		detail := fmt.Sprintf("%s (%d attempt%s left)", detailOf(verr), left, plural(left))
		if left <= 0 {
			detail = fmt.Sprintf("%s (no attempts left: the query failed)", detailOf(verr))
			if err := g.fail(t, q, CodeValidationFailed); err != nil {
				return ack{}, err
			}
		} else if err := t.putQuery(q); err != nil {
			return ack{}, err
		}
		if err := validationFailedEvent(t, protocol.BCPValidationEvent{Controller: q.Controller, Reader: q.Reader, QueryID: q.ID,
			Category: int(q.Spec.Category), AttemptsLeft: &left}, code); err != nil {
			return ack{}, err
		}
		// The detail may quote the Reader: it goes back to the Reader
		// only, never to the Controller (nor to the event above).
		vr := ValidationResult{Type: TypeValidationResult, QueryID: q.ID, Success: false, Code: code, Detail: detail}
		if err := t.send(peer.AgentTopic(q.Reader), vr); err != nil {
			return ack{}, err
		}
		rec.Event = "validation"
		return refuse(t, rec, code, detail)
	}
	t.onCommit(func(m *metrics) { m.validations.WithLabelValues("accepted", "").Inc() })
	if err := anomalyEvent(t, protocol.BCPValidationEvent{Controller: q.Controller, Reader: q.Reader, QueryID: q.ID, Category: int(q.Spec.Category)}, res); err != nil {
		return ack{}, err
	}
	if res.RequiresApproval {
		q.State = stateAwaitingSummary
		if err := t.putQuery(q); err != nil {
			return ack{}, err
		}
		a, err := g.summaryApproval(t, q.Controller, q.Reader, q.Spec, res)
		if err != nil {
			return ack{}, err
		}
		a.ID, a.QueryID = KindSummary+"-"+q.ID, q.ID
		if err := g.requestApproval(t, a); err != nil {
			return ack{}, err
		}
		rec.Event, rec.Outcome, rec.MeasuredBits, rec.Detail = "response", "ok", res.MeasuredBits, evidenceDetail(res.Evidence)
		return accepted("valid; awaiting a reviewer's approval (%s) before delivery", a.ID), t.audit(rec)
	}
	q.State = stateDelivered
	if err := t.putQuery(q); err != nil {
		return ack{}, err
	}
	created, now := q.CreatedAt, t.now
	t.onCommit(func(m *metrics) { m.observeLatency(created, now) })
	detail := fmt.Sprintf("delivered to controller %s (Cat-%d, %.1f bits)", q.Controller, q.Spec.Category, float64(res.DeclaredBits))
	if err := g.deliver(t, q.Controller, q.Reader, ResponseDelivery{QueryID: q.ID}, res); err != nil {
		return ack{}, err
	}
	if err := t.send(peer.AgentTopic(q.Reader), ValidationResult{Type: TypeValidationResult, QueryID: q.ID, Success: true, Detail: detail}); err != nil {
		return ack{}, err
	}
	rec.Event, rec.Outcome, rec.MeasuredBits, rec.Detail = "delivery", "ok", res.MeasuredBits, evidenceDetail(res.Evidence)
	return accepted("%s", detail), t.audit(rec)
}

// evidenceDetail is the audit detail of what the anomalies found in the
// raw answers ("sender invisible: U+200B"): for the operator, never for
// the Controller.
func evidenceDetail(evidence []bcp.Evidence) string {
	parts := make([]string, len(evidence))
	for i, e := range evidence {
		parts[i] = fmt.Sprintf("%s %s: %s", e.Question, e.Kind, e.Detail)
	}
	return strings.Join(parts, "; ")
}

// deliver queues the bcp_response_delivery of a validated result: the
// normalized response only, and the Reader's taint stepped down.
func (g *Gateway) deliver(t *txn, controller, reader string, base ResponseDelivery, res *bcp.Result) error {
	return t.send(peer.AgentTopic(controller), g.delivery(controller, reader, base, res))
}

// delivery builds the bcp_response_delivery of a validated result.
func (g *Gateway) delivery(controller, reader string, base ResponseDelivery, res *bcp.Result) ResponseDelivery {
	base.Type = TypeResponseDelivery
	base.Category = int(res.Category)
	base.FromAgent = reader
	base.Response = res.Response
	base.BandwidthBits = float64(res.DeclaredBits)
	base.Taint = g.stepDownTaint(reader)
	base.Anomalies = res.Anomalies
	return base
}

// summaryApproval builds the approval of a validated summary; the caller
// sets its id and what it answers.
func (g *Gateway) summaryApproval(t *txn, controller, reader string, spec *bcp.Spec, res *bcp.Result) (*Approval, error) {
	var summary struct {
		Summary string `json:"summary"`
	}
	if err := json.Unmarshal(res.Response, &summary); err != nil {
		return nil, fmt.Errorf("bcp gateway: decode validated summary: %w", err)
	}
	return &Approval{Kind: KindSummary, Controller: controller, Reader: reader, Directive: spec.Directive,
		Summary: summary.Summary, Anomalies: res.Anomalies, Result: res}, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
