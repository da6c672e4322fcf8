package telegram

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mymmrac/telego"

	"github.com/bub-bus/bub/peer"
)

// Payload types the bridge sends from outbound:{chat_id}.
const (
	TypePlaintext = "plaintext_message"
	TypeReply     = "telegram_reply"
)

// Reply is the payload of telegram_reply (plaintext_message uses Text
// only). Every field but Text is optional.
type Reply struct {
	Type string `json:"type"`
	Text string `json:"text"`
	// ParseMode is Telegram's: "MarkdownV2", "HTML" or "Markdown". Text
	// is then markup, sent as is: text the agent did not write goes
	// through EscapeMarkdownV2, EscapeHTML (or Escape) first; literal
	// text alone needs no parse_mode. A long text is split only where
	// its markup is complete (splitMarkup), and a piece Telegram cannot
	// parse is sent again as plain text.
	ParseMode string `json:"parse_mode,omitempty"`
	// ReplyToMessageID quotes a message of the chat; if it is gone, the
	// reply is sent without the quote.
	ReplyToMessageID int `json:"reply_to_message_id,omitempty"`
	// MessageThreadID is the forum thread. Default: the thread of the
	// chat's latest message, so replies stay in the conversation's
	// thread.
	MessageThreadID int `json:"message_thread_id,omitempty"`
	// Buttons are rows of inline buttons under the (last piece of the)
	// message: a press comes back as telegram_callback with the button's
	// callback_data, or a button opens its url.
	Buttons [][]Button `json:"buttons,omitempty"`
}

// Button is an inline keyboard button.
type Button struct {
	Text         string `json:"text"`
	CallbackData string `json:"callback_data,omitempty"`
	URL          string `json:"url,omitempty"`
}

// deliver sends an outbound:{chat_id} message to Telegram and answers the
// bus in its terms:
//
//   - sent: processed.
//   - 429: should_retry after Telegram's retry_after.
//   - network error, 5xx, timeout: should_retry with the bus's backoff.
//   - a permanent refusal (blocked, chat not found, a payload that is not
//     a reply): rejected, on whichever attempt it happens, and logged.
//     The bus dead-letters a rejection at once, with reason "rejected"
//     and Telegram's reason in its attempt, so an operator finds it even
//     when the publisher is an agent that does not read its acks; and
//     Telegram is asked once, with nothing to remember across a restart.
func (b *Bridge) deliver(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
	chatRaw := strings.TrimPrefix(d.Topic, "outbound:")
	chatID, err := strconv.ParseInt(chatRaw, 10, 64)
	if err != nil {
		return b.refuse(d, fmt.Sprintf("topic %s does not name a Telegram chat id", d.Topic)), nil
	}
	var r Reply
	if err := d.Decode(&r); err != nil {
		return b.refuse(d, err.Error()), nil
	}
	switch r.Type {
	case TypePlaintext:
		// Only the text: a plaintext_message's other fields (an
		// agent's chat_id, agent_id) are not Telegram's.
		r = Reply{Type: r.Type, Text: r.Text}
	case TypeReply:
	default:
		return b.refuse(d, fmt.Sprintf("payload type %q is not %s or %s", r.Type, TypePlaintext, TypeReply)), nil
	}
	if strings.TrimSpace(r.Text) == "" {
		return b.refuse(d, "empty text"), nil
	}
	if r.MessageThreadID == 0 {
		r.MessageThreadID = b.thread(chatID)
	}
	pieces := splitMarkup(r.Text, r.ParseMode, maxMessageLength)
	b.mu.Lock()
	done := b.progress[d.MessageID]
	for id, p := range b.progress {
		if time.Since(p.at) > progressTTL {
			delete(b.progress, id)
		}
	}
	b.mu.Unlock()
	from := done.sent
	for i := from; i < len(pieces); i++ {
		err := b.sendPiece(ctx, chatID, &r, pieces[i], i == 0, i == len(pieces)-1)
		if err == nil {
			b.mu.Lock()
			b.progress[d.MessageID] = progress{sent: i + 1, at: time.Now()}
			b.mu.Unlock()
			continue
		}
		switch class, retryAfter := classify(err); class {
		case classRateLimited:
			b.metrics.sends.WithLabelValues("rate_limited").Inc()
			b.log.Info("Telegram asks to slow down; the bus retries", "chat_id", chatID, "retry_after", retryAfter, "message_id", d.MessageID)
			return peer.Result{ShouldRetry: true, RetryAfter: retryAfter, Message: "telegram: 429 " + describe(err)}, nil
		case classPermanent:
			b.forget(d.MessageID)
			return b.refuse(d, describe(err)), nil
		default:
			b.metrics.sends.WithLabelValues("retry").Inc()
			b.log.Warn("cannot send to Telegram; the bus retries", "chat_id", chatID, "message_id", d.MessageID, "error", describe(err))
			return peer.Result{ShouldRetry: true, Message: "telegram: " + describe(err)}, nil
		}
	}
	b.forget(d.MessageID)
	b.typing.stop(chatID)
	return peer.Result{Processed: true, Message: fmt.Sprintf("sent to Telegram chat %d in %d message(s)", chatID, len(pieces))}, nil
}

// sendPiece sends one piece of a reply; the quote goes on the first, the
// buttons on the last. Markup Telegram cannot parse is sent again as
// plain text, so a reply is never lost to a stray '*'.
func (b *Bridge) sendPiece(ctx context.Context, chatID int64, r *Reply, text string, first, last bool) error {
	params := &telego.SendMessageParams{
		ChatID:          telego.ChatID{ID: chatID},
		MessageThreadID: r.MessageThreadID,
		Text:            text,
		ParseMode:       r.ParseMode,
	}
	if first && r.ReplyToMessageID != 0 {
		params.ReplyParameters = &telego.ReplyParameters{MessageID: r.ReplyToMessageID, AllowSendingWithoutReply: true}
	}
	if last && len(r.Buttons) > 0 {
		params.ReplyMarkup = keyboard(r.Buttons)
	}
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := b.bot.SendMessage(callCtx, params)
	if err != nil && params.ParseMode != "" {
		if class, _ := classify(err); class == classMarkup {
			b.log.Info("Telegram refused the reply's markup; sending it as plain text", "chat_id", chatID, "parse_mode", params.ParseMode, "reason", describe(err))
			b.metrics.sends.WithLabelValues("plain_text").Inc()
			params.ParseMode = ""
			_, err = b.bot.SendMessage(callCtx, params)
		}
	}
	if err == nil {
		b.metrics.sends.WithLabelValues("sent").Inc()
	}
	return err
}

func keyboard(rows [][]Button) *telego.InlineKeyboardMarkup {
	kb := &telego.InlineKeyboardMarkup{}
	for _, row := range rows {
		var buttons []telego.InlineKeyboardButton
		for _, btn := range row {
			buttons = append(buttons, telego.InlineKeyboardButton{Text: btn.Text, CallbackData: btn.CallbackData, URL: btn.URL})
		}
		kb.InlineKeyboard = append(kb.InlineKeyboard, buttons)
	}
	return kb
}

// refuse answers a message that can never be sent with a rejection,
// which the bus dead-letters at once with the reason (see deliver).
func (b *Bridge) refuse(d *peer.Delivery, reason string) peer.Result {
	b.metrics.sends.WithLabelValues("refused").Inc()
	b.log.Warn("cannot send to Telegram; the message goes to the dead-letter queue", "topic", d.Topic, "message_id", d.MessageID, "attempt", d.Attempt, "reason", reason)
	return peer.Result{Reject: true, Message: "telegram refused: " + reason}
}

func (b *Bridge) forget(messageID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.progress, messageID)
}
