// Package telegramtest is a fake Telegram Bot API server for tests: enough
// of getMe, getUpdates (offset, long-poll timeout), sendMessage (JSON and
// multipart bodies), editMessageReplyMarkup, sendChatAction,
// answerCallbackQuery, setWebhook and deleteWebhook to run a bot against, with injectable failures (429 with
// retry_after, 403, 5xx) and a record of everything the bot sent.
package telegramtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Token is a bot token in Telegram's format, accepted by the fake.
const Token = "123456789:AAbbCCddEEffGGhhIIjjKKllMMnnOOppQQr"

// BotID and BotUsername are the fake bot's, as getMe returns them.
const (
	BotID       = 123456789
	BotUsername = "bub_test_bot"
)

// Sent is a message the bot sent with sendMessage.
type Sent struct {
	// MessageID is the id the fake gave the message.
	MessageID        int
	ChatID           int64
	MessageThreadID  int
	Text             string
	ParseMode        string
	ReplyToMessageID int
	// Buttons are the inline keyboard's callback_data (or url), row by
	// row.
	Buttons [][]string
	// Multipart is true when the request came as multipart/form-data.
	Multipart bool
	At        time.Time
}

// Edit is an editMessageReplyMarkup call: the message's new buttons.
type Edit struct {
	ChatID    int64
	MessageID int
	// Buttons are the new keyboard's callback_data and Labels their
	// texts, row by row.
	Buttons, Labels [][]string
}

// Action is a sendChatAction call.
type Action struct {
	ChatID int64
	Action string
}

// Fault is an answer the fake gives instead of the real one.
type Fault struct {
	// Status is the HTTP status: 429, 403, 400, 502, ...
	Status int
	// Description is Telegram's text, e.g. "Forbidden: bot was blocked
	// by the user".
	Description string
	// RetryAfter is parameters.retry_after for a 429, in seconds.
	RetryAfter int
	// Drop closes the connection without an answer, as a network failure
	// between the bot and Telegram would; Status and the rest are unused.
	Drop bool
}

// Server is the fake Bot API. The zero value is not usable; call Start.
type Server struct {
	*httptest.Server
	t testing.TB // nil for a server made by New

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change
	updates  []json.RawMessage
	ids      []int
	nextID   int
	nextMsg  int
	sent     []Sent
	edits    []Edit
	actions  []Action
	answered []string
	answers  map[string]string // callback query id → the answer's text
	presses  int
	webhook  struct{ url, secret string }
	faults   map[string][]Fault
	calls    map[string]int
	// Blocked chats answer 403 "bot was blocked by the user"; unknown
	// chats 400 "chat not found".
	blocked map[int64]bool
	unknown map[int64]bool
}

// Start starts a fake Bot API server, closed when the test ends.
func Start(t testing.TB) *Server {
	s := New()
	s.t = t
	t.Cleanup(s.Close)
	return s
}

// New starts a fake Bot API server outside a test, on a loopback port,
// for a demonstration (make telegram-demo); the caller closes it.
func New() *Server {
	s := &Server{
		changed: make(chan struct{}), nextID: 1000, nextMsg: 1,
		faults: map[string][]Fault{}, calls: map[string]int{}, answers: map[string]string{},
		blocked: map[int64]bool{}, unknown: map[int64]bool{},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// notify wakes every waiter; s.mu is held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Push queues an update; fields is the update without update_id (e.g.
// {"message": {...}}). It returns the update_id.
func (s *Server) Push(fields map[string]any) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	u := map[string]any{"update_id": s.nextID}
	for k, v := range fields {
		u[k] = v
	}
	raw, err := json.Marshal(u)
	if err != nil && s.t != nil {
		s.t.Fatalf("telegramtest: %v", err)
	}
	if err != nil {
		panic("telegramtest: " + err.Error()) // a field that is no JSON: the caller's mistake
	}
	s.updates = append(s.updates, raw)
	s.ids = append(s.ids, s.nextID)
	s.notify()
	return s.nextID
}

// Text pushes a text message from user in chat (a private chat when they
// are equal, else a group) and returns its update_id.
func (s *Server) Text(chat, user int64, text string) int {
	return s.Push(map[string]any{"message": Message(chat, user, text)})
}

// Message is a message object from user in chat.
func Message(chat, user int64, text string) map[string]any {
	chatType := "private"
	if chat != user {
		chatType = "supergroup"
	}
	return map[string]any{
		"message_id": int(time.Now().UnixNano() % 1e6),
		"date":       time.Now().Unix(),
		"chat":       map[string]any{"id": chat, "type": chatType},
		"from":       map[string]any{"id": user, "is_bot": false, "first_name": "User", "last_name": strconv.FormatInt(user, 10), "username": "user" + strconv.FormatInt(user, 10)},
		"text":       text,
	}
}

// Block makes sendMessage to chat answer 403, as for a bot the user
// blocked; Unknown makes it answer 400 chat not found.
func (s *Server) Block(chat int64) { s.mu.Lock(); s.blocked[chat] = true; s.mu.Unlock() }

// Unknown makes sendMessage to chat answer 400 chat not found.
func (s *Server) Unknown(chat int64) { s.mu.Lock(); s.unknown[chat] = true; s.mu.Unlock() }

// Fail makes the next calls of method answer the faults, one each, in
// order.
func (s *Server) Fail(method string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[method] = append(s.faults[method], faults...)
}

// Sent returns the messages sent so far.
func (s *Server) Sent() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sent(nil), s.sent...)
}

// SentTo returns the messages sent to chat.
func (s *Server) SentTo(chat int64) []Sent {
	var out []Sent
	for _, m := range s.Sent() {
		if m.ChatID == chat {
			out = append(out, m)
		}
	}
	return out
}

// Edits returns the editMessageReplyMarkup calls on messages the bot
// sent, in order.
func (s *Server) Edits() []Edit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Edit(nil), s.edits...)
}

// Reply pushes a text message from user in chat that replies to message
// replyTo, and returns its update_id.
func (s *Server) Reply(chat, user int64, replyTo int, text string) int {
	m := Message(chat, user, text)
	m["reply_to_message"] = map[string]any{"message_id": replyTo, "date": time.Now().Unix(), "chat": m["chat"], "text": "…"}
	return s.Push(map[string]any{"message": m})
}

// Actions returns the chat actions sent so far.
func (s *Server) Actions() []Action {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Action(nil), s.actions...)
}

// Answered returns the callback query ids answered.
func (s *Server) Answered() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.answered...)
}

// AnswerText returns the text a callback query was answered with, and
// whether it was answered.
func (s *Server) AnswerText(callbackQueryID string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text, ok := s.answers[callbackQueryID]
	return text, ok
}

// Press pushes a press by user of the inline button with data under
// message messageID in chat, and returns the callback query's id.
func (s *Server) Press(chat, user int64, messageID int, data string) string {
	s.mu.Lock()
	s.presses++
	id := "press-" + strconv.Itoa(s.presses)
	s.mu.Unlock()
	s.Push(map[string]any{"callback_query": map[string]any{
		"id": id, "chat_instance": "ci", "data": data,
		"from":    map[string]any{"id": user, "is_bot": false, "first_name": "User", "last_name": strconv.FormatInt(user, 10)},
		"message": map[string]any{"message_id": messageID, "date": time.Now().Unix(), "chat": map[string]any{"id": chat, "type": "supergroup"}, "text": "…"},
	}})
	return id
}

// Calls returns how many times method was called.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// Pending returns the update ids not yet confirmed by a getUpdates offset
// past them.
func (s *Server) Pending() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.ids...)
}

// Webhook returns the URL and secret of the webhook set, if any.
func (s *Server) Webhook() (url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.webhook.url, s.webhook.secret
}

// Wait waits up to timeout for cond, checked after every change (and
// every 50ms); it reports whether cond held.
func (s *Server) Wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ch:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// APIURL is the URL to give a bot as its Bot API server.
func (s *Server) APIURL() string { return s.URL }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
	token, method, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		reply(w, http.StatusNotFound, nil, Fault{Status: 404, Description: "Not Found"})
		return
	}
	if token != Token {
		reply(w, http.StatusUnauthorized, nil, Fault{Status: 401, Description: "Unauthorized"})
		return
	}
	params, multipart, err := readParams(r)
	if err != nil {
		reply(w, http.StatusBadRequest, nil, Fault{Status: 400, Description: "Bad Request: " + err.Error()})
		return
	}
	s.mu.Lock()
	s.calls[method]++
	if f := s.faults[method]; len(f) > 0 {
		s.faults[method] = f[1:]
		s.notify()
		s.mu.Unlock()
		if f[0].Drop {
			drop(w)
			return
		}
		reply(w, f[0].Status, nil, f[0])
		return
	}
	s.mu.Unlock()
	switch method {
	case "getMe":
		reply(w, 200, map[string]any{"id": BotID, "is_bot": true, "first_name": "Bub", "username": BotUsername}, Fault{})
	case "getUpdates":
		s.getUpdates(w, r, params)
	case "sendMessage":
		s.sendMessage(w, params, multipart)
	case "editMessageReplyMarkup":
		e := Edit{ChatID: int64Param(params, "chat_id"), MessageID: int(int64Param(params, "message_id"))}
		e.Buttons, e.Labels = keyboard(params["reply_markup"])
		s.mu.Lock()
		known := false
		for _, m := range s.sent {
			known = known || (m.ChatID == e.ChatID && m.MessageID == e.MessageID)
		}
		if known {
			s.edits = append(s.edits, e)
			s.notify()
		}
		s.mu.Unlock()
		if !known {
			reply(w, 400, nil, Fault{Status: 400, Description: "Bad Request: message to edit not found"})
			return
		}
		reply(w, 200, map[string]any{"message_id": e.MessageID, "date": time.Now().Unix(), "chat": map[string]any{"id": e.ChatID, "type": "supergroup"}, "text": "…"}, Fault{})
	case "sendChatAction":
		s.mu.Lock()
		s.actions = append(s.actions, Action{ChatID: int64Param(params, "chat_id"), Action: str(params["action"])})
		s.notify()
		s.mu.Unlock()
		reply(w, 200, true, Fault{})
	case "answerCallbackQuery":
		s.mu.Lock()
		s.answered = append(s.answered, str(params["callback_query_id"]))
		s.answers[str(params["callback_query_id"])] = str(params["text"])
		s.notify()
		s.mu.Unlock()
		reply(w, 200, true, Fault{})
	case "setWebhook":
		s.mu.Lock()
		s.webhook.url, s.webhook.secret = str(params["url"]), str(params["secret_token"])
		s.notify()
		s.mu.Unlock()
		reply(w, 200, true, Fault{})
	case "deleteWebhook":
		s.mu.Lock()
		s.webhook.url, s.webhook.secret = "", ""
		s.notify()
		s.mu.Unlock()
		reply(w, 200, true, Fault{})
	default:
		reply(w, http.StatusNotFound, nil, Fault{Status: 404, Description: "Not Found: method not found"})
	}
}

// getUpdates confirms the updates below offset, as Telegram does, and
// answers those from it on, waiting up to timeout seconds for one.
func (s *Server) getUpdates(w http.ResponseWriter, r *http.Request, params map[string]any) {
	offset := int(int64Param(params, "offset"))
	timeout := time.Duration(int64Param(params, "timeout")) * time.Second
	deadline := time.Now().Add(timeout)
	s.mu.Lock()
	for len(s.ids) > 0 && s.ids[0] < offset {
		s.ids, s.updates = s.ids[1:], s.updates[1:]
	}
	s.notify()
	for len(s.ids) == 0 && time.Now().Before(deadline) {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		case <-r.Context().Done():
			return
		}
		s.mu.Lock()
	}
	out := append([]json.RawMessage{}, s.updates...)
	s.mu.Unlock()
	reply(w, 200, out, Fault{})
}

func (s *Server) sendMessage(w http.ResponseWriter, params map[string]any, multipart bool) {
	m := Sent{
		ChatID: int64Param(params, "chat_id"), MessageThreadID: int(int64Param(params, "message_thread_id")),
		Text: str(params["text"]), ParseMode: str(params["parse_mode"]), Multipart: multipart, At: time.Now(),
	}
	if rp, ok := obj(params["reply_parameters"]); ok {
		m.ReplyToMessageID = int(int64Param(rp, "message_id"))
	}
	m.Buttons, _ = keyboard(params["reply_markup"])
	s.mu.Lock()
	blocked, unknown := s.blocked[m.ChatID], s.unknown[m.ChatID]
	s.mu.Unlock()
	switch {
	case blocked:
		reply(w, 403, nil, Fault{Status: 403, Description: "Forbidden: bot was blocked by the user"})
		return
	case unknown:
		reply(w, 400, nil, Fault{Status: 400, Description: "Bad Request: chat not found"})
		return
	case m.Text == "":
		reply(w, 400, nil, Fault{Status: 400, Description: "Bad Request: message text is empty"})
		return
	case len([]rune(m.Text)) > 4096:
		reply(w, 400, nil, Fault{Status: 400, Description: "Bad Request: message is too long"})
		return
	case badMarkup(m.Text, m.ParseMode):
		reply(w, 400, nil, Fault{Status: 400, Description: "Bad Request: can't parse entities: can't find end of the entity starting at byte offset 0"})
		return
	}
	s.mu.Lock()
	id := s.nextMsg
	s.nextMsg++
	m.MessageID = id
	s.sent = append(s.sent, m)
	s.notify()
	s.mu.Unlock()
	reply(w, 200, map[string]any{
		"message_id": id, "date": time.Now().Unix(),
		"chat": map[string]any{"id": m.ChatID, "type": "private"}, "text": m.Text,
	}, Fault{})
}

// keyboard reads an inline keyboard: each button's callback_data (or
// url) and text, row by row.
func keyboard(markup any) (data, labels [][]string) {
	m, ok := obj(markup)
	if !ok {
		return nil, nil
	}
	rows, _ := m["inline_keyboard"].([]any)
	for _, row := range rows {
		var d, l []string
		buttons, _ := row.([]any)
		for _, b := range buttons {
			bm, _ := b.(map[string]any)
			d, l = append(d, str(bm["callback_data"])+str(bm["url"])), append(l, str(bm["text"]))
		}
		data, labels = append(data, d), append(labels, l)
	}
	return data, labels
}

// badMarkup is the fake's stand-in for Telegram's parser: Markdown with an
// odd number of '*' or '_', and HTML with unbalanced '<' and '>', do not
// parse.
func badMarkup(text, mode string) bool {
	switch mode {
	case "Markdown", "MarkdownV2":
		return strings.Count(text, "*")%2 == 1 || strings.Count(text, "_")%2 == 1
	case "HTML":
		return strings.Count(text, "<") != strings.Count(text, ">")
	}
	return false
}

// readParams reads a request's parameters from a JSON body, a multipart
// form, a urlencoded form or the query, as the Bot API accepts them. Form
// values that hold JSON (reply_markup) are decoded.
func readParams(r *http.Request) (map[string]any, bool, error) {
	params := map[string]any{}
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mediaType {
	case "application/json":
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, false, err
		}
		if len(bytes.TrimSpace(body)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			if err := dec.Decode(&params); err != nil {
				return nil, false, err
			}
		}
		return params, false, nil
	case "multipart/form-data":
		if err := r.ParseMultipartForm(10 << 20); err != nil {
			return nil, true, err
		}
		for k, v := range r.MultipartForm.Value {
			params[k] = formValue(v[0])
		}
		return params, true, nil
	default:
		if err := r.ParseForm(); err != nil {
			return nil, false, err
		}
		for k, v := range r.Form {
			params[k] = formValue(v[0])
		}
		return params, false, nil
	}
}

func formValue(v string) any {
	if strings.HasPrefix(v, "{") || strings.HasPrefix(v, "[") {
		var decoded any
		dec := json.NewDecoder(strings.NewReader(v))
		dec.UseNumber()
		if dec.Decode(&decoded) == nil {
			return decoded
		}
	}
	return v
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func obj(v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	return m, ok
}

func int64Param(params map[string]any, key string) int64 {
	n, _ := strconv.ParseInt(str(params[key]), 10, 64)
	return n
}

// drop closes the request's connection without writing an answer.
func drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // HTTP/2: abort the stream instead
	}
	conn.Close()
}

// reply writes a Bot API answer: {"ok":true,"result":...} or, when
// f.Status is set, the error with its status.
func reply(w http.ResponseWriter, status int, result any, f Fault) {
	w.Header().Set("Content-Type", "application/json")
	body := map[string]any{"ok": f.Status == 0, "result": result}
	if f.Status != 0 {
		body = map[string]any{"ok": false, "error_code": f.Status, "description": f.Description}
		if f.RetryAfter > 0 {
			body["parameters"] = map[string]any{"retry_after": f.RetryAfter}
		}
		status = f.Status
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
