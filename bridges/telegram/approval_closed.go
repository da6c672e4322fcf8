package telegram

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/mymmrac/telego"

	"github.com/bub-bus/bub/peer"
)

// approvalClosed is the part of bcp_approval_closed the bridge shows.
type approvalClosed struct {
	ApprovalID string `json:"approval_id"`
	State      string `json:"state"`
	Edited     bool   `json:"edited"`
	DecidedBy  string `json:"decided_by"`
	Reason     string `json:"reason"`
}

// maxOutcomeRunes bounds the outcome button's label, which quotes the
// decider's reason.
const maxOutcomeRunes = 60

// onApprovalClosed replaces the buttons of a closed approval's message
// with one that shows the outcome, whoever decided (here, another
// approver's client, the CLI) or if nobody did in time. Its caller has
// checked that the gateway sent it.
func (b *Bridge) onApprovalClosed(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
	var c approvalClosed
	if err := d.Decode(&c); err != nil || !validApprovalID(c.ApprovalID) {
		b.approvalMetrics.closed.WithLabelValues("unknown").Inc()
		return peer.Result{Message: "telegram: not a bcp_approval_closed with a printable approval_id"}, nil
	}
	p, ok := b.state.postedApproval(c.ApprovalID, 0)
	if !ok {
		b.approvalMetrics.closed.WithLabelValues("unknown").Inc()
		return peer.Result{Processed: true, Message: "telegram: approval " + c.ApprovalID + " was not posted here"}, nil
	}
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := b.bot.EditMessageReplyMarkup(callCtx, &telego.EditMessageReplyMarkupParams{
		ChatID: telego.ChatID{ID: b.opts.ApproverChat}, MessageID: p.MessageID,
		ReplyMarkup: keyboard([][]Button{{{Text: outcomeLabel(&c), CallbackData: callbackPrefix + "d:" + c.ApprovalID}}}),
	})
	if err != nil {
		class, retryAfter := classify(err)
		if class != classPermanent {
			return peer.Result{ShouldRetry: true, RetryAfter: retryAfter, Message: "telegram: " + describe(err)}, nil
		}
		// The message was deleted, or already shows this outcome.
		b.approvalMetrics.closed.WithLabelValues("failed").Inc()
		b.log.Warn("cannot show the approval's outcome", "approval_id", c.ApprovalID, "error", describe(err))
		return peer.Result{Processed: true, Message: "telegram refused the edit: " + describe(err)}, nil
	}
	b.approvalMetrics.closed.WithLabelValues("shown").Inc()
	return peer.Result{Processed: true, Message: fmt.Sprintf("outcome shown on message %d", p.MessageID)}, nil
}

// outcomeLabel is the text of the button that shows c's outcome.
func outcomeLabel(c *approvalClosed) string {
	var label string
	switch {
	case c.State == "expired":
		label = "Expired: nobody decided in time"
	case c.Edited:
		label = "Edited and approved by " + oneLine(c.DecidedBy)
	case c.State == "approved":
		label = "Approved by " + oneLine(c.DecidedBy)
	default:
		label = "Rejected by " + oneLine(c.DecidedBy)
		if c.Reason != "" {
			label += ": " + oneLine(c.Reason)
		}
	}
	if utf8.RuneCountInString(label) > maxOutcomeRunes {
		label = string([]rune(label)[:maxOutcomeRunes-1]) + "…"
	}
	return label
}
