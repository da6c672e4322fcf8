package telegram

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/mymmrac/telego"
)

// isApprovalEdit reports whether an update is a message in the approver
// chat that replies to a posted summary approval: an edit of that
// summary, which the bridge handles itself instead of forwarding.
func (b *Bridge) isApprovalEdit(u *telego.Update) bool {
	m := u.Message
	if !b.approvalsOn() || m == nil || m.Chat.ID != b.opts.ApproverChat || m.ReplyToMessage == nil {
		return false
	}
	p, ok := b.state.postedApproval("", m.ReplyToMessage.MessageID)
	return ok && p.Kind == "summary"
}

// handleApprovalEdit relays a listed approver's reply as decision edit
// with the reply's text as the summary, and answers in the chat with the
// outcome. A reply by anyone else goes nowhere.
func (b *Bridge) handleApprovalEdit(ctx context.Context, u *telego.Update) error {
	m := u.Message
	p, _ := b.state.postedApproval("", m.ReplyToMessage.MessageID)
	var from int64
	if m.From != nil {
		from = m.From.ID
	}
	if !b.approvers[from] {
		b.approvalMetrics.presses.WithLabelValues("not_allowed").Inc()
		b.log.Warn("approval edit refused: not a listed approver", "user_id", from, "approval_id", p.ID)
		return b.state.done(u.UpdateID)
	}
	var text, outcome string
	if summary := strings.TrimSpace(m.Text); summary == "" {
		text, outcome = "An edit is the new summary as text; nothing was sent.", "help"
	} else {
		who := "tg:" + strconv.FormatInt(from, 10)
		text, outcome = b.sendDecision(ctx, p.ID, "edit", who, summary)
		b.log.Info("approval edit relayed", "approval_id", p.ID, "on_behalf_of", who, "outcome", outcome)
	}
	b.approvalMetrics.presses.WithLabelValues(outcome).Inc()
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, err := b.bot.SendMessage(callCtx, &telego.SendMessageParams{
		ChatID: telego.ChatID{ID: b.opts.ApproverChat}, Text: p.ID + ": " + text,
		ReplyParameters: &telego.ReplyParameters{MessageID: m.MessageID, AllowSendingWithoutReply: true},
	})
	if err != nil {
		b.log.Warn("cannot answer the approval edit in Telegram", "approval_id", p.ID, "error", describe(err))
	}
	return b.state.done(u.UpdateID)
}
