package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/peer"
)

// onQuery handles bcp:query: Controllers' requests and session starts.
func (g *Gateway) onQuery(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	return g.handleEnvelope(d, func(t *txn) (ack, error) {
		switch d.Type() {
		case TypeQueryRequest:
			return g.queryRequest(t, d)
		case TypeSessionStart:
			return g.sessionStart(t, d.From, t.now)
		}
		return refuse(t, AuditRecord{From: d.From}, CodeMalformed, fmt.Sprintf("bcp:query carries %s and %s, not %q", TypeQueryRequest, TypeSessionStart, truncate(d.Type())))
	})
}

// queryRequest checks, charges and forwards a Controller's query. The
// query id is new and random, and the ack names it (QueryIDOf): a Reader
// that knows its own queries' ids can guess no other's, as it could the
// bus's sequential messageIds.
func (g *Gateway) queryRequest(t *txn, d *peer.Delivery) (ack, error) {
	controller := d.From
	rec := AuditRecord{Event: "query", From: controller, Controller: controller}
	req, err := DecodeQueryRequest(d.Payload)
	if err != nil {
		return refuse(t, rec, codeOf(err), detailOf(err))
	}
	rec.Reader = req.Target
	rec.Category, rec.DeclaredBits = req.Spec.Category, req.Spec.Cost()
	ch := g.controllerChannel(controller, req.Target)
	if ch == nil {
		return refuse(t, rec, CodeNoChannel, fmt.Sprintf("%s has no BCP channel to %s in the agent definitions", controller, truncate(req.Target)))
	}
	if req.Spec.Category > ch.MaxCategory {
		return refuse(t, rec, string(bcp.CodeCategoryNotAllowed), fmt.Sprintf("category %d is above the channel's max_category %d", req.Spec.Category, ch.MaxCategory))
	}
	cat3 := req.Spec.Category == bcp.Summary
	if cat3 && len(g.approvers) == 0 {
		return refuse(t, rec, CodeApprovalUnavailable, "Category 3 needs human approval, and this gateway has no approvers configured; ask in Category 1 or 2")
	}
	if cat3 && strings.TrimSpace(req.Justification) == "" {
		return refuse(t, rec, CodeJustificationRequired, "a Category-3 query needs a justification: why Categories 1 and 2 will not do")
	}
	usage, err := g.charge(t, controller, req.Target, ch, req.Spec.Category, req.Spec.Cost())
	left := usage.RemainingBits
	rec.BudgetLeft = &left
	if err != nil {
		return refuse(t, rec, codeOf(err), detailOf(err))
	}
	id, err := newQueryID()
	if err != nil {
		return ack{}, err
	}
	rec.QueryID = id
	q := &queryRecord{
		ID: id, Controller: controller, Reader: req.Target, Spec: req.Spec, Cost: req.Spec.Cost(),
		State: statePending, CreatedAt: t.now, ExpiresAt: t.now.Add(g.opts.QueryTTL),
	}
	if cat3 {
		// The escalation itself needs a human before the Reader sees the
		// directive; the query waits without a deadline of its own.
		q.State = stateAwaitingEscalation
		if err := t.putQuery(q); err != nil {
			return ack{}, err
		}
		a := &Approval{ID: KindEscalation + "-" + q.ID, Kind: KindEscalation, QueryID: q.ID, Controller: controller,
			Reader: q.Reader, Directive: q.Spec.Directive, Justification: req.Justification}
		if err := g.requestApproval(t, a); err != nil {
			return ack{}, err
		}
		rec.Outcome = "ok"
		if err := t.audit(rec); err != nil {
			return ack{}, err
		}
		return accepted("awaiting approval %s: query_id=%s, %.1f bits charged, %.1f left", a.ID, q.ID, float64(q.Cost), float64(left)), nil
	}
	if err := t.putQuery(q); err != nil {
		return ack{}, err
	}
	msg := QueryMessage{
		Type: TypeQuery, QueryID: q.ID, Controller: controller, Category: int(q.Spec.Category),
		Spec: q.Spec, ExpiresAt: q.ExpiresAt.UTC().Format(time.RFC3339),
	}
	if err := t.send(peer.AgentTopic(q.Reader), msg); err != nil {
		return ack{}, err
	}
	rec.Outcome = "ok"
	if err := t.audit(rec); err != nil {
		return ack{}, err
	}
	return accepted("queued: query_id=%s, %.1f bits charged, %.1f left", q.ID, float64(q.Cost), float64(left)), nil
}

// sessionStart resets the budgets of controller's channels: a new
// Controller session gets fresh budgets (bcp-subscriptions.md), keeping
// any charge made at or after since. Only a Controller's own message or
// connect does this; nothing a Reader sends reaches here with a
// Controller's from.
func (g *Gateway) sessionStart(t *txn, controller string, since time.Time) (ack, error) {
	def := g.registry.Definition(controller)
	rec := AuditRecord{Event: "reset", From: controller, Controller: controller}
	if def == nil || !hasRole(def, bcp.Controller) {
		return refuse(t, rec, CodeNoChannel, fmt.Sprintf("%s is not a Controller in the agent definitions", truncate(controller)))
	}
	if err := t.reset(controller, def.Channels, since); err != nil {
		return ack{}, err
	}
	for _, ch := range def.Channels {
		if ch.Role != bcp.Controller {
			continue
		}
		rec, err := t.budget(controller, ch.Peer)
		if err != nil {
			return ack{}, err
		}
		usage := bcp.RestoreBudget(limitsOf(&ch), rec.Usage).Usage()
		left, reader := usage.RemainingBits, ch.Peer
		t.onCommit(func(m *metrics) { m.budgetRemaining.WithLabelValues(controller, reader).Set(float64(left)) })
		if err := budgetEvent(t, "reset", controller, reader, &ch, usage); err != nil {
			return ack{}, err
		}
	}
	rec.Outcome = "ok"
	return accepted("budgets of %s reset", controller), t.audit(rec)
}

// newQueryID returns a query id nobody can guess: 128 random bits.
func newQueryID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("bcp gateway: query id: %w", err)
	}
	return "q-" + hex.EncodeToString(b[:]), nil
}

// QueryIDOf returns the query id an accepted bcp_query_request's ack
// names ("queued: query_id=q-…, …"), or "" if it names none.
func QueryIDOf(ackMessage string) string {
	_, rest, ok := strings.Cut(ackMessage, "query_id=")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ",")
	return id
}

func hasRole(def *bcp.Definition, role bcp.Role) bool {
	for _, ch := range def.Channels {
		if ch.Role == role {
			return true
		}
	}
	return false
}

// detailOf is an error's text without its code prefix.
func detailOf(err error) string {
	if we, ok := err.(*wireError); ok {
		return we.detail
	}
	return err.Error()
}

// charge charges a channel, and once the charge commits counts it; the
// first charge of a session that crosses Options.AlertShare of the budget
// publishes a bcp_budget_alert.
func (g *Gateway) charge(t *txn, controller, reader string, ch *bcp.Channel, c bcp.Category, bits bcp.Bits) (bcp.Usage, error) {
	before, err := t.budget(controller, reader)
	if err != nil {
		return bcp.Usage{}, err
	}
	usage, err := t.charge(controller, reader, limitsOf(ch), c, bits)
	if err != nil {
		return usage, err
	}
	t.onCommit(func(m *metrics) {
		m.bitsSpent.WithLabelValues(controller, reader).Add(float64(bits))
		m.budgetRemaining.WithLabelValues(controller, reader).Set(float64(usage.RemainingBits))
	})
	if err := budgetEvent(t, "charge", controller, reader, ch, usage); err != nil {
		return usage, err
	}
	threshold := g.opts.AlertShare * float64(ch.BudgetBits)
	if float64(before.Usage.SpentBits) < threshold && float64(usage.SpentBits) >= threshold && ch.BudgetBits > 0 {
		alert := BudgetAlert{Type: TypeBudgetAlert, Controller: controller, Reader: reader,
			SpentBits: float64(usage.SpentBits), BudgetBits: float64(ch.BudgetBits), Share: float64(usage.SpentBits) / float64(ch.BudgetBits)}
		if err := t.send(g.opts.AlertTopic, alert); err != nil {
			return usage, err
		}
		left := usage.RemainingBits
		if err := t.audit(AuditRecord{Event: "budget_alert", Controller: controller, Reader: reader, BudgetLeft: &left, Outcome: "ok",
			Detail: fmt.Sprintf("%.1f of %.1f bits spent", float64(usage.SpentBits), float64(ch.BudgetBits))}); err != nil {
			return usage, err
		}
		t.onCommit(func(m *metrics) { m.budgetAlerts.WithLabelValues(controller, reader).Inc() })
	}
	return usage, nil
}
