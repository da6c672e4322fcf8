package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/peer"
)

// Topics and types of Category 3's human approval.
const (
	TopicApproval = "bcp:approval" // approvers: decisions and lists
	// TopicApprovalRequested is the prefix of the approvers' topics
	// (ApprovalTopic).
	TopicApprovalRequested = "bcp:approval.requested"

	TypeApprovalRequest  = "bcp_approval_request"
	TypeApprovalClosed   = "bcp_approval_closed"
	TypeApprovalDecision = "bcp_approval_decision"
	TypeApprovalList     = "bcp_approval_list"
)

// Approval codes.
const (
	// CodeJustificationRequired: a Category-3 query without the
	// Controller's reason for escalating.
	CodeJustificationRequired = "justification_required"
	// CodeNotAnApprover: a decision from a clientId not configured as an
	// approver.
	CodeNotAnApprover = "not_an_approver"
	// CodeUnknownApproval: no approval has that id.
	CodeUnknownApproval = "unknown_approval"
	// CodeApprovalClosed: the approval was already decided or expired.
	CodeApprovalClosed = "approval_closed"
	// CodeApprovalRejected: a human rejected the escalation or the
	// summary, or nobody decided in time (the Reader's side).
	CodeApprovalRejected = "approval_rejected"
)

// Approval kinds: the escalation to Category 3 itself, before the
// Reader sees the directive, and the summary, before the Controller sees
// it.
const (
	KindEscalation = "escalation"
	KindSummary    = "summary"
)

// Approval states.
const (
	approvalPending  = "pending"
	approvalApproved = "approved"
	approvalRejected = "rejected"
	approvalExpired  = "expired"
)

// Query states while a human decides.
const (
	stateAwaitingEscalation = "awaiting_escalation"
	stateAwaitingSummary    = "awaiting_summary"
)

var bucketApprovals = []byte("approvals") // approval id → Approval

// Approval is a decision a human owes, as kept and as listed.
type Approval struct {
	ID             string        `json:"approval_id"`
	Kind           string        `json:"kind"`
	State          string        `json:"state"`
	QueryID        string        `json:"query_id,omitempty"`
	SubscriptionID string        `json:"subscription_id,omitempty"`
	Controller     string        `json:"controller"`
	Reader         string        `json:"reader"`
	Directive      string        `json:"directive"`
	Justification  string        `json:"justification,omitempty"`
	Summary        string        `json:"summary,omitempty"`
	Anomalies      []bcp.Anomaly `json:"anomalies,omitempty"`
	Result         *bcp.Result   `json:"result,omitempty"`
	CreatedAt      time.Time     `json:"created_at"`
	ExpiresAt      time.Time     `json:"expires_at"`
	// Warning labels a summary as a tainted agent's text, wherever the
	// approval is shown.
	Warning   string `json:"warning,omitempty"`
	DecidedBy string `json:"decided_by,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// ApprovalRequest is bcp_approval_request, published on
// bcp:approval.requested. Summary is text a tainted agent wrote; the
// Warning says so to whoever displays it.
type ApprovalRequest struct {
	Type           string        `json:"type"`
	ApprovalID     string        `json:"approval_id"`
	Kind           string        `json:"kind"`
	Controller     string        `json:"controller"`
	Reader         string        `json:"reader"`
	QueryID        string        `json:"query_id,omitempty"`
	SubscriptionID string        `json:"subscription_id,omitempty"`
	Directive      string        `json:"directive"`
	Justification  string        `json:"justification,omitempty"`
	Summary        string        `json:"summary,omitempty"`
	Anomalies      []bcp.Anomaly `json:"anomalies,omitempty"`
	ExpiresAt      string        `json:"expires_at"`
	Warning        string        `json:"warning,omitempty"`
}

// ApprovalClosed is bcp_approval_closed, published on
// bcp:approval.requested when an approval is decided or expires, so that
// whoever shows the request (the Telegram bridge's buttons) can show its
// outcome.
type ApprovalClosed struct {
	Type       string `json:"type"`
	ApprovalID string `json:"approval_id"`
	Kind       string `json:"kind"`
	// State is approved, rejected or expired.
	State string `json:"state"`
	// Edited is set when a human replaced the summary.
	Edited    bool   `json:"edited,omitempty"`
	DecidedBy string `json:"decided_by,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// ApprovalTopic is the topic on which the gateway tells one approver or
// relay (by clientId) what awaits a decision and how it closed:
// "bcp:approval.requested.alice". Each has its own because the bus routes
// a message to only the newest of identical patterns: on one shared topic
// only the approver client that subscribed last would hear.
func ApprovalTopic(clientID string) string { return TopicApprovalRequested + "." + clientID }

// toApprovers queues payload for every approver and relay, each on its
// own topic, in the order of their names.
func (g *Gateway) toApprovers(t *txn, payload any) error {
	for _, name := range g.approverNames {
		if err := t.send(ApprovalTopic(name), payload); err != nil {
			return err
		}
	}
	return nil
}

// announceClosed tells the approvers a's outcome.
func (g *Gateway) announceClosed(t *txn, a *Approval, edited bool) error {
	return g.toApprovers(t, ApprovalClosed{
		Type: TypeApprovalClosed, ApprovalID: a.ID, Kind: a.Kind, State: a.State, Edited: edited, DecidedBy: a.DecidedBy, Reason: a.Reason,
	})
}

// Decision is bcp_approval_decision.
type Decision struct {
	ApprovalID string `json:"approval_id"`
	Decision   string `json:"decision"` // approve, reject or edit
	Summary    string `json:"summary,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// OnBehalfOf is the human a relay decides for ("tg:42"); only a
	// relay may set it, and must.
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
}

// DecodeDecision decodes a bcp_approval_decision strictly. It never
// panics.
func DecodeDecision(payload []byte) (*Decision, error) {
	raw, err := decodeEnvelope(payload, TypeApprovalDecision)
	if err != nil {
		return nil, err
	}
	var d Decision
	for k := range raw {
		switch k {
		case "type", "approval_id", "decision", "summary", "reason", "on_behalf_of":
		default:
			return nil, &wireError{CodeMalformed, fmt.Sprintf("unknown key %q in bcp_approval_decision", truncate(k))}
		}
	}
	if err := decodeString(raw, "approval_id", &d.ApprovalID, true); err != nil {
		return nil, err
	}
	if err := decodeString(raw, "decision", &d.Decision, true); err != nil {
		return nil, err
	}
	if v, ok := raw["summary"]; ok && json.Unmarshal(v, &d.Summary) != nil {
		return nil, &wireError{CodeMalformed, "summary is not a string"}
	}
	if err := decodeString(raw, "reason", &d.Reason, false); err != nil {
		return nil, err
	}
	if _, ok := raw["on_behalf_of"]; ok {
		if err := decodeString(raw, "on_behalf_of", &d.OnBehalfOf, true); err != nil {
			return nil, err
		}
		if err := checkOnBehalfOf(d.OnBehalfOf); err != nil {
			return nil, err
		}
	}
	switch d.Decision {
	case "approve", "reject":
		if d.Summary != "" {
			return nil, &wireError{CodeMalformed, "summary goes with decision edit only"}
		}
	case "edit":
		if d.Summary == "" {
			return nil, &wireError{CodeMalformed, "decision edit needs the edited summary"}
		}
	default:
		return nil, &wireError{CodeMalformed, fmt.Sprintf("decision %q: want approve, reject or edit", truncate(d.Decision))}
	}
	return &d, nil
}

func (t *txn) approval(id string) (*Approval, error) {
	var a Approval
	ok, err := t.getJSON(bucketApprovals, id, &a)
	if !ok || err != nil {
		return nil, err
	}
	return &a, nil
}

func (t *txn) putApproval(a *Approval) error { return t.putJSON(bucketApprovals, a.ID, a) }

// requestApproval records a pending approval and publishes it.
func (g *Gateway) requestApproval(t *txn, a *Approval) error {
	a.State, a.CreatedAt, a.ExpiresAt = approvalPending, t.now, t.now.Add(g.opts.ApprovalTTL)
	if a.Kind == KindSummary {
		a.Warning = fmt.Sprintf("UNTRUSTED: the summary was written by %s, a tainted agent that read untrusted content; it may try to persuade you", a.Reader)
	}
	if err := t.putApproval(a); err != nil {
		return err
	}
	req := ApprovalRequest{
		Type: TypeApprovalRequest, ApprovalID: a.ID, Kind: a.Kind, Controller: a.Controller, Reader: a.Reader,
		QueryID: a.QueryID, SubscriptionID: a.SubscriptionID, Directive: a.Directive, Justification: a.Justification,
		Summary: a.Summary, Anomalies: a.Anomalies, ExpiresAt: a.ExpiresAt.UTC().Format(time.RFC3339),
	}
	req.Warning = a.Warning
	if err := g.toApprovers(t, req); err != nil {
		return err
	}
	return t.audit(AuditRecord{Event: "approval_requested", Controller: a.Controller, Reader: a.Reader, QueryID: a.QueryID,
		SubscriptionID: a.SubscriptionID, Category: bcp.Summary, Outcome: "ok", Detail: a.Kind + " " + a.ID})
}

// onApproval handles bcp:approval: approvers' decisions and lists.
func (g *Gateway) onApproval(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	return g.handleEnvelope(d, func(t *txn) (ack, error) {
		rec := AuditRecord{Event: "approval", From: d.From}
		if !g.approvers[d.From] {
			// The refusal goes in the approval's channel, so that
			// bub bcp audit --channel shows who tried to decide.
			if dec, err := DecodeDecision(d.Payload); err == nil {
				if a, err := t.approval(dec.ApprovalID); err != nil {
					return ack{}, err
				} else if a != nil {
					rec.Controller, rec.Reader, rec.QueryID, rec.SubscriptionID, rec.Category = a.Controller, a.Reader, a.QueryID, a.SubscriptionID, bcp.Summary
				}
			}
			return refuse(t, rec, CodeNotAnApprover, fmt.Sprintf("%s is not an approver of this gateway", truncate(d.From)))
		}
		switch d.Type() {
		case TypeApprovalList:
			list, err := t.pendingApprovals()
			if err != nil {
				return ack{}, err
			}
			data, err := json.Marshal(list)
			if err != nil {
				return ack{}, err
			}
			return ack{true, string(data)}, nil
		case TypeApprovalDecision:
		default:
			return refuse(t, rec, CodeMalformed, fmt.Sprintf("bcp:approval carries %s and %s, not %q", TypeApprovalDecision, TypeApprovalList, truncate(d.Type())))
		}
		dec, err := DecodeDecision(d.Payload)
		if err != nil {
			return refuse(t, rec, codeOf(err), detailOf(err))
		}
		rec.OnBehalfOf = dec.OnBehalfOf
		if code, detail := g.checkDecider(d.From, dec); code != "" {
			return refuse(t, rec, code, detail)
		}
		return g.decide(t, decider{d.From, dec.OnBehalfOf}, dec)
	})
}

// pendingApprovals lists the approvals awaiting a decision, oldest first.
func (t *txn) pendingApprovals() ([]*Approval, error) {
	list := []*Approval{}
	err := t.tx.Bucket(bucketApprovals).ForEach(func(k, v []byte) error {
		var a Approval
		if err := json.Unmarshal(v, &a); err != nil {
			return fmt.Errorf("bcp gateway: approval %q: %w", k, err)
		}
		if a.State == approvalPending {
			a.Result = nil
			list = append(list, &a)
		}
		return nil
	})
	sort.Slice(list, func(i, j int) bool { return list[i].CreatedAt.Before(list[j].CreatedAt) })
	return list, err
}

// decide applies an approver's decision.
func (g *Gateway) decide(t *txn, approver decider, dec *Decision) (ack, error) {
	rec := AuditRecord{Event: "approval", From: approver.from, OnBehalfOf: approver.onBehalfOf}
	a, err := t.approval(dec.ApprovalID)
	if err != nil {
		return ack{}, err
	}
	if a == nil {
		return refuse(t, rec, CodeUnknownApproval, fmt.Sprintf("no approval %q", truncate(dec.ApprovalID)))
	}
	rec.Controller, rec.Reader, rec.QueryID, rec.SubscriptionID, rec.Category = a.Controller, a.Reader, a.QueryID, a.SubscriptionID, bcp.Summary
	if a.State != approvalPending {
		return refuse(t, rec, CodeApprovalClosed, fmt.Sprintf("approval %s is %s", a.ID, a.State))
	}
	if !t.now.Before(a.ExpiresAt) {
		if err := g.expireApproval(t, a); err != nil {
			return ack{}, err
		}
		return refuse(t, rec, CodeApprovalClosed, fmt.Sprintf("approval %s expired", a.ID))
	}
	if dec.Decision == "edit" {
		if a.Kind != KindSummary {
			return refuse(t, rec, CodeMalformed, "only a summary can be edited; approve or reject an escalation")
		}
		// An edited summary is validated again: a human's text gets the
		// same limits as the Reader's.
		spec, err := g.summarySpec(t, a)
		if err != nil {
			return ack{}, err
		}
		if spec == nil {
			return refuse(t, rec, CodeInternal, "the summary's spec is gone from the definitions")
		}
		resp, _ := json.Marshal(map[string]string{"summary": dec.Summary})
		res, verr := spec.Validate(resp, bcp.ValidateOptions{})
		if verr != nil {
			return refuse(t, rec, codeOf(verr), "edited summary: "+detailOf(verr))
		}
		a.Result = res
	}
	a.DecidedBy, a.Reason = approver.String(), dec.Reason
	if dec.Decision == "reject" {
		a.State = approvalRejected
	} else {
		a.State = approvalApproved
	}
	if err := t.putApproval(a); err != nil {
		return ack{}, err
	}
	if err := g.announceClosed(t, a, dec.Decision == "edit"); err != nil {
		return ack{}, err
	}
	switch {
	case a.Kind == KindEscalation && a.State == approvalApproved:
		err = g.escalationApproved(t, a)
	case a.Kind == KindEscalation:
		err = g.closeQuery(t, a.QueryID, CodeApprovalRejected)
	case a.State == approvalApproved:
		err = g.summaryApproved(t, a)
	default:
		err = g.summaryRejected(t, a, CodeApprovalRejected, "rejected by reviewer: "+dec.Reason)
	}
	if err != nil {
		return ack{}, err
	}
	rec.Outcome, rec.Detail = "ok", dec.Decision+" "+a.ID
	outcome := a.State
	if dec.Decision == "edit" {
		outcome = "edited and approved"
	}
	return accepted("%s: %s %s", a.ID, a.Kind, outcome), t.audit(rec)
}

// summarySpec is the spec the summary of a answers: its query's, or its
// subscription's. nil means it is gone.
func (g *Gateway) summarySpec(t *txn, a *Approval) (*bcp.Spec, error) {
	if a.QueryID != "" {
		q, err := t.query(a.QueryID)
		if err != nil || q == nil {
			return nil, err
		}
		return q.Spec, nil
	}
	sub, err := g.registry.Subscription(a.Reader, a.Controller, a.SubscriptionID)
	if err != nil {
		return nil, nil
	}
	return sub.Spec, nil
}

// escalationApproved sends the Category-3 query to the Reader, with its
// answer time counted from now.
func (g *Gateway) escalationApproved(t *txn, a *Approval) error {
	q, err := t.query(a.QueryID)
	if err != nil || q == nil {
		return err
	}
	q.State, q.ExpiresAt = statePending, t.now.Add(g.opts.QueryTTL)
	if err := t.putQuery(q); err != nil {
		return err
	}
	return t.send(peer.AgentTopic(q.Reader), QueryMessage{
		Type: TypeQuery, QueryID: q.ID, Controller: q.Controller, Category: int(q.Spec.Category),
		Spec: q.Spec, ExpiresAt: q.ExpiresAt.UTC().Format(time.RFC3339),
	})
}

// closeQuery fails a query awaiting a decision.
func (g *Gateway) closeQuery(t *txn, queryID, code string) error {
	q, err := t.query(queryID)
	if err != nil || q == nil {
		return err
	}
	return g.fail(t, q, code)
}

// summaryApproved delivers the approved (or edited) summary.
func (g *Gateway) summaryApproved(t *txn, a *Approval) error {
	base := ResponseDelivery{QueryID: a.QueryID, SubscriptionID: a.SubscriptionID}
	if err := g.deliver(t, a.Controller, a.Reader, base, a.Result); err != nil {
		return err
	}
	err := t.audit(AuditRecord{Event: "delivery", From: a.Reader, Controller: a.Controller, Reader: a.Reader, QueryID: a.QueryID,
		SubscriptionID: a.SubscriptionID, Category: bcp.Summary, DeclaredBits: a.Result.DeclaredBits, MeasuredBits: a.Result.MeasuredBits,
		Outcome: "ok", Detail: "approved by " + a.DecidedBy})
	if err != nil {
		return err
	}
	if a.QueryID != "" {
		q, err := t.query(a.QueryID)
		if err != nil || q == nil {
			return err
		}
		q.State = stateDelivered
		if err := t.putQuery(q); err != nil {
			return err
		}
		created, now := q.CreatedAt, t.now
		t.onCommit(func(m *metrics) { m.observeLatency(created, now) })
	}
	return t.send(peer.AgentTopic(a.Reader), ValidationResult{
		Type: TypeValidationResult, QueryID: a.QueryID, SubscriptionID: a.SubscriptionID, Success: true,
		Detail: fmt.Sprintf("approved by a reviewer and delivered to controller %s", a.Controller),
	})
}

// summaryRejected tells the Reader, and for a query the Controller, that
// the summary will not be delivered.
func (g *Gateway) summaryRejected(t *txn, a *Approval, controllerCode, readerDetail string) error {
	if a.QueryID != "" {
		if err := g.closeQuery(t, a.QueryID, controllerCode); err != nil {
			return err
		}
	}
	return t.send(peer.AgentTopic(a.Reader), ValidationResult{
		Type: TypeValidationResult, QueryID: a.QueryID, SubscriptionID: a.SubscriptionID, Success: false,
		Code: CodeApprovalRejected, Detail: readerDetail,
	})
}

// expireApproval closes an approval nobody decided in time: the
// Controller's query fails with expired, the Reader hears approval_rejected.
func (g *Gateway) expireApproval(t *txn, a *Approval) error {
	a.State = approvalExpired
	if err := t.putApproval(a); err != nil {
		return err
	}
	if err := g.announceClosed(t, a, false); err != nil {
		return err
	}
	var err error
	if a.Kind == KindEscalation {
		err = g.closeQuery(t, a.QueryID, CodeExpired)
	} else {
		err = g.summaryRejected(t, a, CodeExpired, "no reviewer decided in time")
	}
	if err != nil {
		return err
	}
	return t.audit(AuditRecord{Event: "approval", Controller: a.Controller, Reader: a.Reader, QueryID: a.QueryID,
		SubscriptionID: a.SubscriptionID, Category: bcp.Summary, Outcome: CodeExpired, Detail: a.Kind + " " + a.ID})
}

// expiredApprovals lists the ids of pending approvals past their time.
func (s *state) expiredApprovals(now time.Time) ([]string, error) {
	var ids []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketApprovals).ForEach(func(k, v []byte) error {
			var a Approval
			if json.Unmarshal(v, &a) == nil && a.State == approvalPending && !now.Before(a.ExpiresAt) {
				ids = append(ids, string(k))
			}
			return nil
		})
	})
	return ids, err
}

// countPendingApprovals counts the approvals awaiting a decision.
func (s *state) countPendingApprovals() (int, error) {
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketApprovals).ForEach(func(_, v []byte) error {
			var a struct {
				State string `json:"state"`
			}
			if json.Unmarshal(v, &a) == nil && a.State == approvalPending {
				n++
			}
			return nil
		})
	})
	return n, err
}
