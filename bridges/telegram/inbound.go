package telegram

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mymmrac/telego"
)

// Payload types the bridge publishes on tg:{chat_id}.
const (
	TypeMessage       = "telegram_message"
	TypeEditedMessage = "telegram_edited_message"
	TypeCallback      = "telegram_callback"
)

// Message is the payload of telegram_message and telegram_edited_message.
// The first five fields are what every agent may rely on; the rest are
// what an agent needs to answer well. Ids that Telegram gives as numbers
// stay numbers, except chat_id, a string as in the topic (tg:<chat_id>),
// so that an agent can address its reply with it as it came.
type Message struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	From      string `json:"from"`
	ChatID    string `json:"chat_id"`
	Timestamp string `json:"timestamp"`
	MessageID int    `json:"message_id"`

	UpdateID         int    `json:"update_id"`
	UserID           int64  `json:"user_id,omitempty"`
	Username         string `json:"username,omitempty"`
	ChatType         string `json:"chat_type"`
	ReplyToMessageID int    `json:"reply_to_message_id,omitempty"`
	MessageThreadID  int    `json:"message_thread_id,omitempty"`
	// Kind is "text", or the media kind: photo, document, audio, video,
	// voice, video_note, sticker, animation.
	Kind string `json:"kind"`
	// FileID names the media for getFile; the bridge does not download.
	// For a photo, it is the largest size.
	FileID  string `json:"file_id,omitempty"`
	Caption string `json:"caption,omitempty"`
	// EditDate is set on telegram_edited_message.
	EditDate string `json:"edit_date,omitempty"`
}

// Callback is the payload of telegram_callback: a press of an inline
// button of a message the bot sent (telegram_reply's buttons).
type Callback struct {
	Type            string `json:"type"`
	Data            string `json:"data"`
	CallbackQueryID string `json:"callback_query_id"`
	From            string `json:"from"`
	UserID          int64  `json:"user_id"`
	Username        string `json:"username,omitempty"`
	ChatID          string `json:"chat_id"`
	ChatType        string `json:"chat_type,omitempty"`
	MessageID       int    `json:"message_id"`
	MessageThreadID int    `json:"message_thread_id,omitempty"`
	Timestamp       string `json:"timestamp"`
	UpdateID        int    `json:"update_id"`
}

// inbound is an update made ready for the bus.
type inbound struct {
	updateID int
	kind     string // the update's kind, for metrics and logs
	chatID   int64
	thread   int
	payload  any
}

// topic is the conversation's topic.
func (in *inbound) topic() string { return "tg:" + strconv.FormatInt(in.chatID, 10) }

// errSkip is returned by translate for an update that is not forwarded;
// its outcome says why.
type errSkip struct{ outcome string }

func (e errSkip) Error() string { return "skipped: " + e.outcome }

// translate turns an update into what goes on the bus, or an errSkip.
func (b *Bridge) translate(u *telego.Update) (*inbound, error) {
	switch {
	case u.Message != nil:
		return b.translateMessage(u.UpdateID, "message", TypeMessage, u.Message)
	case u.EditedMessage != nil:
		return b.translateMessage(u.UpdateID, "edited_message", TypeEditedMessage, u.EditedMessage)
	case u.CallbackQuery != nil:
		return b.translateCallback(u.UpdateID, u.CallbackQuery)
	default:
		return &inbound{updateID: u.UpdateID, kind: updateKind(u)}, errSkip{"unsupported"}
	}
}

func (b *Bridge) translateMessage(updateID int, kind, typ string, m *telego.Message) (*inbound, error) {
	in := &inbound{updateID: updateID, kind: kind, chatID: m.Chat.ID, thread: m.MessageThreadID}
	var userID int64
	if m.From != nil {
		userID = m.From.ID
	}
	if !b.allowed(m.Chat.ID, userID) {
		return in, errSkip{"not_allowed"}
	}
	if isGroup(m.Chat.Type) && b.opts.GroupMode == GroupModeMention && !b.addressed(m) {
		return in, errSkip{"not_mentioned"}
	}
	p := Message{
		Type:            typ,
		Text:            m.Text,
		ChatID:          strconv.FormatInt(m.Chat.ID, 10),
		Timestamp:       unixTime(m.Date),
		MessageID:       m.MessageID,
		UpdateID:        updateID,
		ChatType:        m.Chat.Type,
		MessageThreadID: m.MessageThreadID,
		Kind:            "text",
		Caption:         m.Caption,
	}
	if m.From != nil {
		p.From, p.UserID, p.Username = displayName(m.From), m.From.ID, m.From.Username
	}
	if m.ReplyToMessage != nil {
		p.ReplyToMessageID = m.ReplyToMessage.MessageID
	}
	if m.EditDate != 0 {
		p.EditDate = unixTime(m.EditDate)
	}
	p.Kind, p.FileID = media(m)
	if m.Text == "" && p.FileID == "" {
		// Service messages (members joining, pins), locations,
		// contacts, polls: nothing an agent could read as a message.
		return in, errSkip{"unsupported"}
	}
	in.payload = p
	return in, nil
}

func (b *Bridge) translateCallback(updateID int, q *telego.CallbackQuery) (*inbound, error) {
	in := &inbound{updateID: updateID, kind: "callback_query"}
	if q.Message == nil {
		// A button on an inline-mode message has no chat to talk to.
		return in, errSkip{"unsupported"}
	}
	chat := q.Message.GetChat()
	in.chatID = chat.ID
	if m := q.Message.Message(); m != nil {
		in.thread = m.MessageThreadID
	}
	if !b.allowed(chat.ID, q.From.ID) {
		return in, errSkip{"not_allowed"}
	}
	in.payload = Callback{
		Type:            TypeCallback,
		Data:            q.Data,
		CallbackQueryID: q.ID,
		From:            displayName(&q.From),
		UserID:          q.From.ID,
		Username:        q.From.Username,
		ChatID:          strconv.FormatInt(chat.ID, 10),
		ChatType:        chat.Type,
		MessageID:       q.Message.GetMessageID(),
		MessageThreadID: in.thread,
		Timestamp:       time.Now().UTC().Format(time.RFC3339),
		UpdateID:        updateID,
	}
	return in, nil
}

// allowed applies the allow-lists: either list admits; both empty admit
// everyone.
func (b *Bridge) allowed(chatID, userID int64) bool {
	if len(b.allowChats) == 0 && len(b.allowUsers) == 0 {
		return true
	}
	return b.allowChats[chatID] || (userID != 0 && b.allowUsers[userID])
}

func isGroup(chatType string) bool { return chatType == "group" || chatType == "supergroup" }

// addressed reports whether a group message is meant for the bot: it
// mentions @username (in text or caption, any case, as Telegram matches
// usernames), mentions the bot by a text mention, or replies to the bot.
func (b *Bridge) addressed(m *telego.Message) bool {
	if m.ReplyToMessage != nil && m.ReplyToMessage.From != nil && m.ReplyToMessage.From.ID == b.botID {
		return true
	}
	if b.botUsername != "" {
		at := "@" + strings.ToLower(b.botUsername)
		if strings.Contains(strings.ToLower(m.Text), at) || strings.Contains(strings.ToLower(m.Caption), at) {
			return true
		}
	}
	for _, e := range append(m.Entities, m.CaptionEntities...) {
		if e.Type == "text_mention" && e.User != nil && e.User.ID == b.botID {
			return true
		}
	}
	return false
}

// media returns a message's kind and, for media, its file_id.
func media(m *telego.Message) (kind, fileID string) {
	switch {
	case len(m.Photo) > 0:
		return "photo", m.Photo[len(m.Photo)-1].FileID // sizes come smallest first
	case m.Document != nil:
		return "document", m.Document.FileID
	case m.Audio != nil:
		return "audio", m.Audio.FileID
	case m.Video != nil:
		return "video", m.Video.FileID
	case m.Voice != nil:
		return "voice", m.Voice.FileID
	case m.VideoNote != nil:
		return "video_note", m.VideoNote.FileID
	case m.Sticker != nil:
		return "sticker", m.Sticker.FileID
	case m.Animation != nil:
		return "animation", m.Animation.FileID
	}
	return "text", ""
}

func displayName(u *telego.User) string {
	return strings.TrimSpace(u.FirstName + " " + u.LastName)
}

func unixTime(sec int64) string { return time.Unix(sec, 0).UTC().Format(time.RFC3339) }

// updateKind names the field an update carries, for the counter of
// dropped kinds.
func updateKind(u *telego.Update) string {
	switch {
	case u.ChannelPost != nil:
		return "channel_post"
	case u.EditedChannelPost != nil:
		return "edited_channel_post"
	case u.BusinessMessage != nil, u.EditedBusinessMessage != nil, u.BusinessConnection != nil, u.DeletedBusinessMessages != nil:
		return "business"
	case u.MessageReaction != nil, u.MessageReactionCount != nil:
		return "message_reaction"
	case u.InlineQuery != nil, u.ChosenInlineResult != nil:
		return "inline_query"
	case u.ShippingQuery != nil, u.PreCheckoutQuery != nil, u.PurchasedPaidMedia != nil:
		return "payment"
	case u.Poll != nil, u.PollAnswer != nil:
		return "poll"
	case u.MyChatMember != nil, u.ChatMember != nil, u.ChatJoinRequest != nil:
		return "chat_member"
	case u.ChatBoost != nil, u.RemovedChatBoost != nil:
		return "chat_boost"
	}
	return "other"
}

// handle takes one update: it skips one seen before, forwards it (trying
// until the bus accepts it, or once when once is set), and records it as
// done. It returns nil when the update needs nothing more, an error when
// it must be tried again later (ctx ended, or once and not accepted).
func (b *Bridge) handle(ctx context.Context, u *telego.Update, once bool) error {
	if b.state.seen(u.UpdateID) {
		b.metrics.updates.WithLabelValues(updateKindOf(u), "duplicate").Inc()
		return nil
	}
	if b.isApprovalPress(u) {
		return b.handleApprovalPress(ctx, u)
	}
	if b.isApprovalEdit(u) {
		return b.handleApprovalEdit(ctx, u)
	}
	in, err := b.translate(u)
	var skip errSkip
	if errors.As(err, &skip) {
		b.metrics.updates.WithLabelValues(in.kind, skip.outcome).Inc()
		if skip.outcome == "not_allowed" {
			b.log.Info("update dropped: chat and sender not on the allow-lists", "update_id", u.UpdateID, "chat_id", in.chatID)
		} else {
			b.log.Debug("update dropped", "update_id", u.UpdateID, "kind", in.kind, "outcome", skip.outcome)
		}
		return b.state.done(u.UpdateID)
	}
	if u.CallbackQuery != nil {
		// Answered before forwarding: Telegram shows the button
		// spinning until then, and the agent's answer comes as a
		// message anyway.
		if err := b.bot.AnswerCallbackQuery(ctx, &telego.AnswerCallbackQueryParams{CallbackQueryID: u.CallbackQuery.ID}); err != nil {
			b.log.Debug("answerCallbackQuery failed", "error", describe(err))
		}
	}
	b.rememberThread(in.chatID, in.thread)
	b.typing.start(in.chatID, in.thread)
	if err := b.forward(ctx, in, once); err != nil {
		b.typing.stop(in.chatID)
		return err
	}
	b.metrics.updates.WithLabelValues(in.kind, "forwarded").Inc()
	return b.state.done(u.UpdateID)
}

// updateKindOf is the kind label of any update.
func updateKindOf(u *telego.Update) string {
	switch {
	case u.Message != nil:
		return "message"
	case u.EditedMessage != nil:
		return "edited_message"
	case u.CallbackQuery != nil:
		return "callback_query"
	}
	return updateKind(u)
}

// forwardGrace is how long a forward already under way may finish after
// the bridge is told to stop: an answer cut off would leave the bridge not
// knowing whether the bus took the message, and forward it again on
// restart.
const forwardGrace = 10 * time.Second

// forward publishes in on its topic until the bus accepts it: the result
// says it was routed (success) or held. A bus that is down, or that has
// nobody serving tg:* (no spawner yet), does not take the message, so it
// is tried again with backoff; the update stays unconfirmed meanwhile.
func (b *Bridge) forward(ctx context.Context, in *inbound, once bool) error {
	for attempt := 0; ; attempt++ {
		err := b.forwardOnce(ctx, in)
		if err == nil {
			return nil
		}
		b.metrics.busRetries.Inc()
		if once || ctx.Err() != nil {
			return err
		}
		level := b.log.Warn
		if attempt > 0 {
			level = b.log.Debug // said once per message is enough
		}
		level("the bus did not accept a Telegram message; retrying", "topic", in.topic(), "update_id", in.updateID, "error", err)
		if !sleep(ctx, retryWait(attempt, b.opts.retryMax)) {
			return ctx.Err()
		}
	}
}

func (b *Bridge) forwardOnce(ctx context.Context, in *inbound) error {
	conn := b.conn.Load()
	if conn == nil {
		return errors.New("not connected to the bus yet")
	}
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(forwardGrace, cancel)
		context.AfterFunc(callCtx, func() { t.Stop() })
	})
	defer stop()
	res, err := conn.SendMessage(callCtx, in.topic(), in.payload, nil)
	if err != nil {
		return err
	}
	if res.NoSubscribers() {
		return fmt.Errorf("no subscriber for %s (is bub spawner running?)", in.topic())
	}
	return nil
}

// rememberThread keeps the chat's latest forum thread for replies.
func (b *Bridge) rememberThread(chatID int64, thread int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if thread != 0 {
		b.threads[chatID] = thread
	} else {
		delete(b.threads, chatID)
	}
}

func (b *Bridge) thread(chatID int64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.threads[chatID]
}
