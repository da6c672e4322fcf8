package gateway

import (
	"fmt"
	"time"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// Codes of subscription publishes, as bcp-subscriptions.md names them.
const (
	CodeSubscriptionNotFound = string(bcp.CodeSubscriptionNotFound)
	// CodePushRateExceeded: the subscription's max_pushes_per_hour
	// publishes were accepted within the last hour.
	CodePushRateExceeded = "push_rate_exceeded"
)

// TypeSubscriptionsActive is the message that tells a Reader what it may
// publish.
const TypeSubscriptionsActive = "bcp_subscriptions_active"

// SubscriptionsActive is bcp_subscriptions_active, sent to agent:{reader}.
type SubscriptionsActive struct {
	Type          string                   `json:"type"`
	Subscriptions []bcp.ActiveSubscription `json:"subscriptions"`
}

// publish handles a Reader's publish against a Controller's subscription:
// validated exactly as an answer, charged to the same channel budget, and
// delivered with the subscription's id.
func (g *Gateway) publish(t *txn, reader, messageID string, r *Response) (ack, error) {
	rec := AuditRecord{Event: "publish", From: reader, Reader: reader, Controller: r.Controller, SubscriptionID: r.SubscriptionID}
	result := func(success bool, code, detail string) error {
		return t.send(peer.AgentTopic(reader), ValidationResult{
			Type: TypeValidationResult, SubscriptionID: r.SubscriptionID, Success: success, Code: code, Detail: detail,
		})
	}
	// refuse tells the Reader too: a publish's outcome is its
	// validation result, whatever refused it.
	refusePublish := func(code, detail string) (ack, error) {
		if err := result(false, code, detail); err != nil {
			return ack{}, err
		}
		return refuse(t, rec, code, detail)
	}
	sub, err := g.registry.Subscription(reader, r.Controller, r.SubscriptionID)
	if err != nil {
		return refusePublish(CodeSubscriptionNotFound, fmt.Sprintf("no active subscription %q from controller %q", truncate(r.SubscriptionID), truncate(r.Controller)))
	}
	ch := g.controllerChannel(r.Controller, reader)
	rec.Category, rec.DeclaredBits = sub.Spec.Category, sub.Spec.Cost()
	if sub.Spec.Category == bcp.Summary && len(g.approvers) == 0 {
		return refusePublish(CodeApprovalUnavailable, "a Category-3 publish needs human approval, and this gateway has no approvers configured")
	}
	if sub.MaxPushesPerHour > 0 {
		recent, err := t.recentPushes(reader, r.Controller, r.SubscriptionID)
		if err != nil {
			return ack{}, err
		}
		if len(recent) >= sub.MaxPushesPerHour {
			next := recent[0].Add(pushWindow).UTC().Format(time.RFC3339)
			return refusePublish(CodePushRateExceeded, fmt.Sprintf("subscription %q allows %d publishes per hour; the next is allowed at %s", r.SubscriptionID, sub.MaxPushesPerHour, next))
		}
	}
	res, verr := sub.Spec.Validate(r.Response, ch.ValidateOptions())
	if verr != nil {
		rec.Event = "validation"
		code := codeOf(verr)
		t.onCommit(func(m *metrics) { m.validations.WithLabelValues("rejected", code).Inc() })
		if err := validationFailedEvent(t, protocol.BCPValidationEvent{Controller: r.Controller, Reader: reader, SubscriptionID: r.SubscriptionID,
			Category: int(sub.Spec.Category)}, code); err != nil {
			return ack{}, err
		}
		return refusePublish(CodeValidationFailed, fmt.Sprintf("%s: %s", codeOf(verr), detailOf(verr)))
	}
	// Charged after validation: an invalid publish delivers nothing, so
	// it costs the channel nothing (a query is charged up front because
	// its cost is committed once the Reader has the question).
	usage, err := g.charge(t, r.Controller, reader, ch, sub.Spec.Category, sub.Spec.Cost())
	left := usage.RemainingBits
	rec.BudgetLeft = &left
	if err != nil {
		code := codeOf(err)
		detail := detailOf(err)
		if code == string(bcp.CodeBudgetExhausted) {
			detail = fmt.Sprintf("bandwidth budget exhausted for channel to %q: %s", r.Controller, detail)
		}
		return refusePublish(code, detail)
	}
	if err := t.recordPush(reader, r.Controller, r.SubscriptionID); err != nil {
		return ack{}, err
	}
	t.onCommit(func(m *metrics) { m.validations.WithLabelValues("accepted", "").Inc() })
	if err := anomalyEvent(t, protocol.BCPValidationEvent{Controller: r.Controller, Reader: reader, SubscriptionID: r.SubscriptionID,
		Category: int(sub.Spec.Category)}, res); err != nil {
		return ack{}, err
	}
	if res.RequiresApproval {
		a, err := g.summaryApproval(t, r.Controller, reader, sub.Spec, res)
		if err != nil {
			return ack{}, err
		}
		a.ID, a.SubscriptionID = KindSummary+"-"+messageID, r.SubscriptionID
		if err := g.requestApproval(t, a); err != nil {
			return ack{}, err
		}
		rec.Outcome, rec.MeasuredBits, rec.Detail = "ok", res.MeasuredBits, evidenceDetail(res.Evidence)
		return accepted("valid; awaiting a reviewer's approval (%s) before delivery", a.ID), t.audit(rec)
	}
	detail := fmt.Sprintf("published to controller %s (Cat-%d, %.1f bits)", r.Controller, sub.Spec.Category, float64(res.DeclaredBits))
	if err := g.deliverPush(t, r.Controller, reader, r.SubscriptionID, res, detail); err != nil {
		return ack{}, err
	}
	rec.Outcome, rec.MeasuredBits, rec.Detail = "ok", res.MeasuredBits, evidenceDetail(res.Evidence)
	return accepted("%s", detail), t.audit(rec)
}

// deliverPush queues the bcp_response_delivery of a validated push and,
// as its outcome, the Reader's bcp_validation_result: success once the
// bus has routed or held the delivery, controller_unavailable (and an
// audit record) when the bus could do neither. On this bus an absent
// Controller is not unavailable: agent:* is held until it connects (the
// spawner may start it), which is how this bus starts a new Controller
// session. Unavailable is a session that could not be started: the bus refuses agent:{controller} to the gateway, or
// does not hold it and nobody subscribes (docs/BCP.md,
// "controller_unavailable").
func (g *Gateway) deliverPush(t *txn, controller, reader, subscriptionID string, res *bcp.Result, detail string) error {
	d := g.delivery(controller, reader, ResponseDelivery{SubscriptionID: subscriptionID}, res)
	m, err := newOutMessage(peer.AgentTopic(controller), d)
	if err != nil {
		return err
	}
	ok, err := newOutMessage(peer.AgentTopic(reader), ValidationResult{
		Type: TypeValidationResult, SubscriptionID: subscriptionID, Success: true, Detail: detail,
	})
	if err != nil {
		return err
	}
	failed, err := newOutMessage(peer.AgentTopic(reader), ValidationResult{
		Type: TypeValidationResult, SubscriptionID: subscriptionID, Code: CodeControllerUnavailable,
		Detail: fmt.Sprintf("controller %q is unavailable", controller),
	})
	if err != nil {
		return err
	}
	m.Outcome = &outcome{Delivered: ok, Undeliverable: failed, Audit: &AuditRecord{
		Event: "publish", From: reader, Reader: reader, Controller: controller, SubscriptionID: subscriptionID,
		Category: res.Category, DeclaredBits: res.DeclaredBits, MeasuredBits: res.MeasuredBits,
		Outcome: CodeControllerUnavailable, Detail: "delivery to " + peer.AgentTopic(controller),
	}}
	return t.queue(m)
}
