package telegram

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mymmrac/telego"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/peer"
)

// BCP human approval (docs/BCP.md, "Category 3 and human approval"): with
// Options.ApproverChat and Options.Approvers, the bridge posts each
// bcp_approval_request the BCP gateway publishes to the approver chat,
// with Approve and Reject buttons (and Edit for a summary), and relays a
// listed approver's press to the gateway as a bcp_approval_decision on
// behalf of "tg:{user id}". A summary is edited by replying to its
// message with the new text, which goes to the gateway as decision edit
// (and is validated there again); the Edit button only says so. The
// gateway accepts a decision only if it lists the bridge as a relay for
// that user (bub bcp gateway --relays telegram=ID). When the gateway
// announces that an approval closed (bcp_approval_closed: decided here,
// from the CLI, or expired), the buttons are replaced by one that shows
// the outcome.

// Topics and types of the BCP approval wire, as the gateway defines them
// (bcp/gateway); repeated here so that the bridge does not depend on the
// gateway.
const (
	TopicApproval = "bcp:approval"
	// TopicApprovalRequested is the prefix of the topic on which the
	// gateway tells each approver and relay, by clientId, what awaits a
	// decision: the bridge hears "bcp:approval.requested.{ClientID}".
	TopicApprovalRequested = "bcp:approval.requested"

	typeApprovalRequest  = "bcp_approval_request"
	typeApprovalClosed   = "bcp_approval_closed"
	typeApprovalDecision = "bcp_approval_decision"
)

// DefaultGatewayID is the BCP gateway's default clientId: the only
// publisher whose approval requests the bridge believes.
const DefaultGatewayID = "bcp-gateway"

// callbackPrefix starts the callback data of the approval buttons:
// "bcpa:y:{approval_id}" approves, "bcpa:n:{approval_id}" rejects,
// "bcpa:e:{approval_id}" explains how to edit, and "bcpa:d:{approval_id}"
// is the button that shows a closed approval's outcome.
const callbackPrefix = "bcpa:"

// maxCallbackData is Telegram's limit on a button's callback_data, in
// bytes.
const maxCallbackData = 64

// Limits of the posted text: a Telegram message holds 4096 characters,
// and an approver should read it at a glance.
const (
	maxQuotedRunes  = 1200 // per quoted agent text
	maxAnswerLength = 200  // answerCallbackQuery's text
)

// approvalRequest is the part of bcp_approval_request the bridge shows.
type approvalRequest struct {
	Type           string `json:"type"`
	ApprovalID     string `json:"approval_id"`
	Kind           string `json:"kind"`
	Controller     string `json:"controller"`
	Reader         string `json:"reader"`
	QueryID        string `json:"query_id"`
	SubscriptionID string `json:"subscription_id"`
	Directive      string `json:"directive"`
	Justification  string `json:"justification"`
	Summary        string `json:"summary"`
	Anomalies      []struct {
		Question string `json:"question"`
		Kind     string `json:"kind"`
	} `json:"anomalies"`
	ExpiresAt string `json:"expires_at"`
	Warning   string `json:"warning"`
}

// approvalMetrics count what happens to approval requests and presses.
type approvalMetrics struct {
	// requests by outcome: posted, untrusted_source, malformed,
	// no_buttons (posted, but the id is too long for callback data),
	// retry, refused.
	requests *prometheus.CounterVec
	// presses by outcome: approved, rejected, edited, not_allowed,
	// refused (by the gateway), unavailable (no gateway answered),
	// help (Edit pressed, or a closed approval's button).
	presses *prometheus.CounterVec
	// closed by outcome: shown, unknown (not posted here), failed.
	closed *prometheus.CounterVec
}

func newApprovalMetrics(reg *prometheus.Registry) *approvalMetrics {
	m := &approvalMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_telegram_approval_requests_total", Help: "BCP approval requests from the bus, by outcome (posted, no_buttons, untrusted_source, malformed, retry, refused).",
		}, []string{"outcome"}),
		presses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_telegram_approval_presses_total", Help: "Presses of approval buttons and edit replies, by outcome (approved, rejected, edited, not_allowed, refused, unavailable, help).",
		}, []string{"outcome"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bub_telegram_approval_closed_total", Help: "Approvals the gateway closed, by what the bridge did with their message (shown, unknown, failed).",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.requests, m.presses, m.closed)
	return m
}

// approvalsOn reports whether the bridge relays BCP approvals.
func (b *Bridge) approvalsOn() bool { return b.opts.ApproverChat != 0 }

// approvalTopic is where the gateway sends this bridge its approval
// requests: a topic of its own, so that no other approver's client, whose
// subscription would shadow an identical one, can keep them from it.
func (b *Bridge) approvalTopic() string { return TopicApprovalRequested + "." + b.opts.ClientID }

// subscribeApprovals subscribes the bridge's approval topic when
// approvals are on.
func (b *Bridge) subscribeApprovals(ctx context.Context, conn *peer.Conn) error {
	if !b.approvalsOn() {
		return nil
	}
	topic := b.approvalTopic()
	if err := conn.Subscribe(ctx, topic, b.onApprovalRequest, nil); err != nil {
		return fmt.Errorf("telegram: subscribe %s: %w (with --approver-chat the bridge's credential must allow it, and publishing to %s)", topic, err, TopicApproval)
	}
	return nil
}

// onApprovalRequest posts a bcp_approval_request to the approver chat.
func (b *Bridge) onApprovalRequest(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
	if d.From != b.opts.GatewayID {
		// Agents may publish on bcp:*; only the gateway's requests
		// are real.
		b.approvalMetrics.requests.WithLabelValues("untrusted_source").Inc()
		b.log.Warn("approval request not from the BCP gateway; not shown", "from", d.From, "gateway_id", b.opts.GatewayID, "message_id", d.MessageID)
		return peer.Result{Message: fmt.Sprintf("telegram: approval requests are shown only from %s, not %s", b.opts.GatewayID, d.From)}, nil
	}
	if d.Type() == typeApprovalClosed {
		return b.onApprovalClosed(ctx, d)
	}
	var req approvalRequest
	if err := d.Decode(&req); err != nil || req.Type != typeApprovalRequest || !validApprovalID(req.ApprovalID) {
		b.approvalMetrics.requests.WithLabelValues("malformed").Inc()
		b.log.Warn("approval request not understood; not shown", "message_id", d.MessageID, "type", d.Type())
		return peer.Result{Message: "telegram: not a bcp_approval_request with a printable approval_id"}, nil
	}
	params := &telego.SendMessageParams{
		ChatID: telego.ChatID{ID: b.opts.ApproverChat},
		// No parse mode: agents' text is shown as it is, never as
		// markup or links in disguise.
		Text:               approvalText(&req),
		LinkPreviewOptions: &telego.LinkPreviewOptions{IsDisabled: true},
	}
	outcome := "posted"
	if yes, no := callbackPrefix+"y:"+req.ApprovalID, callbackPrefix+"n:"+req.ApprovalID; len(yes) <= maxCallbackData {
		row := []Button{{Text: "Approve", CallbackData: yes}, {Text: "Reject", CallbackData: no}}
		if req.Kind == "summary" {
			row = append(row, Button{Text: "Edit", CallbackData: callbackPrefix + "e:" + req.ApprovalID})
		}
		params.ReplyMarkup = keyboard([][]Button{row})
	} else {
		outcome = "no_buttons"
		params.Text += "\n\nThe approval id is too long for Telegram's buttons; decide with:\nbub bcp approvals approve " + req.ApprovalID
	}
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sent, err := b.bot.SendMessage(callCtx, params)
	if err != nil {
		class, retryAfter := classify(err)
		if class == classPermanent {
			b.approvalMetrics.requests.WithLabelValues("refused").Inc()
			b.log.Error("Telegram refused the approval request for the approver chat", "chat_id", b.opts.ApproverChat, "approval_id", req.ApprovalID, "error", describe(err))
			return peer.Result{Message: "telegram refused the approval request: " + describe(err)}, nil
		}
		b.approvalMetrics.requests.WithLabelValues("retry").Inc()
		b.log.Warn("cannot post the approval request to Telegram; the bus retries", "approval_id", req.ApprovalID, "error", describe(err))
		return peer.Result{ShouldRetry: true, RetryAfter: retryAfter, Message: "telegram: " + describe(err)}, nil
	}
	if err := b.state.rememberApproval(postedApproval{ID: req.ApprovalID, Kind: req.Kind, MessageID: sent.MessageID}); err != nil {
		// Posted all the same: only the outcome's display and edits by
		// reply need the record.
		b.log.Error("cannot record the approval message", "approval_id", req.ApprovalID, "error", err)
	}
	b.approvalMetrics.requests.WithLabelValues(outcome).Inc()
	b.log.Info("approval request posted", "approval_id", req.ApprovalID, "kind", req.Kind, "chat_id", b.opts.ApproverChat)
	return peer.Result{Processed: true, Message: fmt.Sprintf("posted to Telegram chat %d", b.opts.ApproverChat)}, nil
}

// approvalText is what the approver chat reads: the gateway's facts,
// then every text an agent wrote, each line behind a bar so that an
// agent's text cannot pass for the bridge's own lines.
func approvalText(req *approvalRequest) string {
	var s strings.Builder
	fmt.Fprintf(&s, "BCP approval needed: %s\n", oneLine(req.Kind))
	fmt.Fprintf(&s, "Approval: %s\n", req.ApprovalID)
	fmt.Fprintf(&s, "Controller %s, Reader %s\n", oneLine(req.Controller), oneLine(req.Reader))
	if req.SubscriptionID != "" {
		fmt.Fprintf(&s, "Subscription: %s\n", oneLine(req.SubscriptionID))
	}
	fmt.Fprintf(&s, "Expires: %s\n\n", oneLine(req.ExpiresAt))
	s.WriteString("UNTRUSTED CONTENT: the lines starting with ┃ were written by agents, not by this bot or the gateway. ")
	if req.Kind == "summary" {
		fmt.Fprintf(&s, "The summary comes from %s, a tainted agent that read untrusted content: it may try to persuade you. ", oneLine(req.Reader))
	}
	s.WriteString("Do not follow instructions or links in them.\n")
	if req.Warning != "" {
		fmt.Fprintf(&s, "Gateway warning: %s\n", oneLine(req.Warning))
	}
	quote(&s, "Directive, by "+oneLine(req.Controller), req.Directive)
	quote(&s, "Justification, by "+oneLine(req.Controller), req.Justification)
	quote(&s, "Summary, by "+oneLine(req.Reader)+" (TAINTED)", req.Summary)
	if len(req.Anomalies) > 0 {
		s.WriteString("\nAnomalies found by the gateway:")
		for _, a := range req.Anomalies {
			fmt.Fprintf(&s, " %s (%s);", oneLine(a.Kind), oneLine(a.Question))
		}
		s.WriteString("\n")
	}
	if req.Kind == "summary" {
		s.WriteString("\nApprove or Reject below, or reply to this message with an edited summary. Only the listed approvers count.")
	} else {
		s.WriteString("\nApprove or Reject below. Only the listed approvers' presses count.")
	}
	return s.String()
}

// quote writes an agent's text under a heading, each line behind a bar,
// cleaned of invisible characters and cut to maxQuotedRunes.
func quote(s *strings.Builder, heading, text string) {
	if text == "" {
		return
	}
	text = clean(text)
	if n := utf8.RuneCountInString(text); n > maxQuotedRunes {
		text = string([]rune(text)[:maxQuotedRunes]) + fmt.Sprintf("… (%d more characters: bub bcp approvals show ID)", n-maxQuotedRunes)
	}
	fmt.Fprintf(s, "\n%s:\n", heading)
	for _, line := range strings.Split(text, "\n") {
		s.WriteString("┃ " + line + "\n")
	}
}

// clean drops the characters that could hide or reorder text (controls
// but the newline, format characters such as bidirectional overrides and
// zero-width spaces, private use), and makes other line breaks newlines.
func clean(text string) string {
	text = strings.ToValidUTF8(text, "�")
	var b strings.Builder
	for _, r := range text {
		switch {
		case r == '\n' || r == '\u2028' || r == '\u2029' || r == '\r' || r == '\v' || r == '\f' || r == '\u0085':
			b.WriteByte('\n')
		case r == '\t':
			b.WriteByte(' ')
		case unicode.Is(unicode.Cc, r), unicode.Is(unicode.Cf, r), unicode.Is(unicode.Co, r):
		default:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

// oneLine is clean for a field that fits on one line.
func oneLine(text string) string {
	return strings.Join(strings.Fields(clean(text)), " ")
}

// validApprovalID reports whether id is a short printable id without
// spaces, as the gateway makes them.
func validApprovalID(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	for _, r := range id {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' ' {
			return false
		}
	}
	return true
}

// isApprovalPress reports whether an update is a press of an approval
// button, which the bridge handles itself instead of forwarding.
func (b *Bridge) isApprovalPress(u *telego.Update) bool {
	return b.approvalsOn() && u.CallbackQuery != nil && strings.HasPrefix(u.CallbackQuery.Data, callbackPrefix)
}

// handleApprovalPress relays a listed approver's press to the gateway
// and answers the press with the outcome. A press by anyone else, or in
// another chat, is answered "not allowed" and goes nowhere.
func (b *Bridge) handleApprovalPress(ctx context.Context, u *telego.Update) error {
	q := u.CallbackQuery
	var chatID int64
	if q.Message != nil {
		chatID = q.Message.GetChat().ID
	}
	verdict, id, ok := strings.Cut(strings.TrimPrefix(q.Data, callbackPrefix), ":")
	decision := map[string]string{"y": "approve", "n": "reject", "e": "edit", "d": "closed"}[verdict]
	switch {
	case !ok || decision == "" || !validApprovalID(id):
		b.answerPress(ctx, q.ID, "not an approval button", "not_allowed")
		b.log.Warn("approval press with unknown data; ignored", "update_id", u.UpdateID, "user_id", q.From.ID)
		return b.state.done(u.UpdateID)
	case !b.approvers[q.From.ID] || chatID != b.opts.ApproverChat:
		b.answerPress(ctx, q.ID, "not allowed: you are not an approver here", "not_allowed")
		b.log.Warn("approval press refused: not a listed approver in the approver chat", "user_id", q.From.ID, "chat_id", chatID, "approval_id", id)
		return b.state.done(u.UpdateID)
	case decision == "edit":
		b.answerPress(ctx, q.ID, "To edit, reply to this message with the new summary; it is checked against the query's limits again.", "help")
		return b.state.done(u.UpdateID)
	case decision == "closed":
		b.answerPress(ctx, q.ID, "This approval is closed.", "help")
		return b.state.done(u.UpdateID)
	}
	who := "tg:" + strconv.FormatInt(q.From.ID, 10)
	text, outcome := b.sendDecision(ctx, id, decision, who, "")
	b.answerPress(ctx, q.ID, text, outcome)
	b.log.Info("approval press relayed", "approval_id", id, "decision", decision, "on_behalf_of", who, "outcome", outcome)
	return b.state.done(u.UpdateID)
}

// sendDecision publishes a decision on bcp:approval (summary is the
// edited one, for decision edit) and returns the text to answer with,
// and the outcome for the metrics.
func (b *Bridge) sendDecision(ctx context.Context, id, decision, who, summary string) (text, outcome string) {
	conn := b.conn.Load()
	if conn == nil {
		return "not connected to the bus; try again", "unavailable"
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	payload := map[string]string{"type": typeApprovalDecision, "approval_id": id, "decision": decision, "on_behalf_of": who}
	if decision == "edit" {
		payload["summary"] = summary
	}
	res, err := conn.SendMessage(callCtx, TopicApproval, payload, nil)
	switch {
	case err != nil:
		b.log.Warn("cannot send the approval decision to the bus", "approval_id", id, "error", err)
		return "the bus did not take the decision; try again", "unavailable"
	case len(res.Acks) == 0 || res.Acks[0].Error != "":
		return "no BCP gateway answered; try again", "unavailable"
	case !res.Acks[0].Processed:
		return "refused by the gateway: " + res.Acks[0].Message, "refused"
	case decision == "approve":
		return "approved", "approved"
	case decision == "edit":
		return "edited summary approved", "edited"
	default:
		return "rejected", "rejected"
	}
}

// answerPress answers a callback query with text (cut to Telegram's
// limit) and counts the press.
func (b *Bridge) answerPress(ctx context.Context, callbackID, text, outcome string) {
	b.approvalMetrics.presses.WithLabelValues(outcome).Inc()
	if utf8.RuneCountInString(text) > maxAnswerLength {
		text = string([]rune(text)[:maxAnswerLength-1]) + "…"
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := b.bot.AnswerCallbackQuery(callCtx, &telego.AnswerCallbackQueryParams{CallbackQueryID: callbackID, Text: text}); err != nil {
		b.log.Debug("answerCallbackQuery failed", "error", describe(err))
	}
}
