package telegram_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bridges/telegram"
	"github.com/bub-bus/bub/bridges/telegram/telegramtest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

func TestOutboundPlaintextAndReply(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(telegram.Options{})
	h.send("outbound:42", map[string]any{"type": "plaintext_message", "text": "hi there", "chat_id": "42"})
	h.send("outbound:-1001", map[string]any{"type": "telegram_reply", "text": "*bold*", "parse_mode": "MarkdownV2",
		"reply_to_message_id": 7, "message_thread_id": 4, "buttons": [][]map[string]any{{{"text": "Yes", "callback_data": "y"}, {"text": "Docs", "url": "https://example.org"}}}})
	if !h.tg.Wait(wait, func() bool { return len(h.tg.Sent()) == 2 }) {
		t.Fatalf("sent %+v", h.tg.Sent())
	}
	if m := h.tg.SentTo(42); len(m) != 1 || m[0].Text != "hi there" || m[0].ParseMode != "" {
		t.Fatalf("to 42: %+v", m)
	}
	m := h.tg.SentTo(-1001)
	if len(m) != 1 || m[0].Text != "*bold*" || m[0].ParseMode != "MarkdownV2" || m[0].ReplyToMessageID != 7 || m[0].MessageThreadID != 4 ||
		len(m[0].Buttons) != 1 || strings.Join(m[0].Buttons[0], ",") != "y,https://example.org" {
		t.Fatalf("to -1001: %+v", m)
	}
}

func TestOutboundMarkupFallsBackToPlainText(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b, _ := h.start(telegram.Options{})
	h.send("outbound:42", map[string]any{"type": "telegram_reply", "text": "2 * 3 = 6", "parse_mode": "MarkdownV2"})
	if !h.tg.Wait(wait, func() bool { return len(h.tg.Sent()) == 1 }) {
		t.Fatal("not sent")
	}
	if m := h.tg.Sent()[0]; m.Text != "2 * 3 = 6" || m.ParseMode != "" {
		t.Fatalf("sent %+v", m)
	}
	if n := metric(t, b, "bub_telegram_sends_total", "outcome", "plain_text"); n != 1 {
		t.Fatalf("plain_text %v", n)
	}
}

func TestOutboundLongReplySplit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(telegram.Options{})
	var paras []string
	for i := range 30 {
		paras = append(paras, fmt.Sprintf("paragraph %d: %s", i, strings.Repeat("word ", 70)))
	}
	text := strings.Join(paras, "\n\n")
	h.send("outbound:42", map[string]any{"type": "plaintext_message", "text": text})
	want := (len(text) + 4095) / 4096
	if !h.tg.Wait(wait, func() bool { return len(h.tg.Sent()) >= want }) {
		t.Fatalf("sent %d pieces", len(h.tg.Sent()))
	}
	var got []string
	for _, m := range h.tg.Sent() {
		if len(m.Text) > 4096 {
			t.Fatalf("piece of %d chars", len(m.Text))
		}
		if !strings.HasPrefix(m.Text, "paragraph ") {
			t.Fatalf("piece not cut at a paragraph: %.40q", m.Text)
		}
		got = append(got, m.Text)
	}
	if strings.Join(got, "\n\n") != text {
		t.Fatal("pieces do not add up to the text")
	}
}

func TestOutbound429HonoursRetryAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b, _ := h.start(telegram.Options{})
	h.tg.Fail("sendMessage", telegramtest.Fault{Status: 429, Description: "Too Many Requests: retry after 1", RetryAfter: 1})
	start := time.Now()
	h.send("outbound:42", map[string]any{"type": "plaintext_message", "text": "later"})
	if !h.tg.Wait(wait, func() bool { return len(h.tg.Sent()) == 1 }) {
		t.Fatal("not sent after the 429")
	}
	// The bus waited Telegram's retry_after, not its own 50ms backoff.
	if got := h.tg.Sent()[0].At.Sub(start); got < time.Second {
		t.Fatalf("sent again after %v, before retry_after", got)
	}
	if n := metric(t, b, "bub_telegram_sends_total", "outcome", "rate_limited"); n != 1 {
		t.Fatalf("rate_limited %v", n)
	}
}

func TestOutbound5xxRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(telegram.Options{})
	h.tg.Fail("sendMessage", telegramtest.Fault{Status: 502, Description: "Bad Gateway"}, telegramtest.Fault{Status: 500, Description: "Internal"})
	h.send("outbound:42", map[string]any{"type": "plaintext_message", "text": "eventually"})
	if !h.tg.Wait(wait, func() bool { return len(h.tg.Sent()) == 1 }) {
		t.Fatal("not sent after 5xx")
	}
	if n := h.tg.Calls("sendMessage"); n != 3 {
		t.Fatalf("sendMessage called %d times", n)
	}
}

// deadLetters lists the bus's dead-letter queue.
func deadLetters(t *testing.T, h *harness) []protocol.DeadLetter {
	t.Helper()
	conn, err := peer.Dial(context.Background(), h.bus.URL, &peer.Options{NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var res protocol.DLQListResult
	if err := conn.Call(context.Background(), protocol.MethodDLQList, protocol.DLQListParams{}, &res); err != nil {
		t.Fatal(err)
	}
	return res.Entries
}

// TestOutboundRefusalsEndInDeadLetterQueue: what Telegram refuses for
// good, and payloads the bridge cannot send, are rejected on the first
// attempt: each is in the dead-letter queue, with Telegram's reason,
// before sendMessage answers, its ack names the dead letter, and no retry
// is left that a restarted bridge would send again.
func TestOutboundRefusalsEndInDeadLetterQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(telegram.Options{})
	h.tg.Block(42)
	h.tg.Unknown(43)
	for _, r := range []*protocol.SendMessageResult{
		h.send("outbound:42", map[string]any{"type": "plaintext_message", "text": "to a blocker"}),
		h.send("outbound:43", map[string]any{"type": "plaintext_message", "text": "to nowhere"}),
		h.send("outbound:44", map[string]any{"type": "image_message", "url": "x"}),
	} {
		if len(r.Acks) != 1 || r.Acks[0].DeadLetter == "" || r.Acks[0].Retrying {
			t.Errorf("acks %+v, want one naming its dead letter, no retry", r.Acks)
		}
	}
	dl := deadLetters(t, h)
	reasons := map[string]string{}
	for _, d := range dl {
		if len(d.Attempts) != 1 {
			t.Errorf("%s: %d attempts, want the first only", d.Topic, len(d.Attempts))
		}
		last := d.Attempts[len(d.Attempts)-1].Error
		reasons[d.Topic] = d.Reason + ": " + last
	}
	for topic, want := range map[string]string{"outbound:42": "bot was blocked", "outbound:43": "chat not found", "outbound:44": `"image_message"`} {
		if !strings.HasPrefix(reasons[topic], "rejected: ") || !strings.Contains(reasons[topic], want) {
			t.Errorf("%s: dead letter %q, want rejected with %q", topic, reasons[topic], want)
		}
	}
	if len(h.tg.Sent()) != 0 {
		t.Fatalf("sent %+v", h.tg.Sent())
	}
	// Telegram was asked once per chat, and the refusals were logged.
	if n := h.tg.Calls("sendMessage"); n != 2 {
		t.Errorf("sendMessage called %d times, want once for each chat", n)
	}
	for _, want := range []string{"bot was blocked by the user", "chat not found"} {
		if !strings.Contains(h.logs.String(), want) {
			t.Errorf("%q not logged:\n%s", want, h.logs)
		}
	}
}

// A connection that breaks before Telegram answers is a network error:
// the bus retries the reply with its backoff until it goes through.
func TestOutboundNetworkErrorRetried(t *testing.T) {
	h := newHarness(t)
	h.start(telegram.Options{})
	h.tg.Fail("sendMessage", telegramtest.Fault{Drop: true}, telegramtest.Fault{Drop: true})
	h.send("outbound:42", map[string]any{"type": "plaintext_message", "text": "through a flaky network"})
	if !h.tg.Wait(wait, func() bool { return len(h.tg.Sent()) == 1 }) {
		t.Fatal("not sent after the broken connections")
	}
	if n := h.tg.Calls("sendMessage"); n != 3 {
		t.Fatalf("sendMessage called %d times, want 2 broken + 1", n)
	}
	if m := h.tg.Sent()[0]; m.ChatID != 42 || m.Text != "through a flaky network" {
		t.Fatalf("sent %+v", m)
	}
}

// In a forum group, the bot is addressed by a reply to it as well as by a
// mention; a plain reply on outbound:{chat} goes to the group and to the
// thread of the conversation, never privately to the sender.
func TestGroupReplyGoesToChatAndThread(t *testing.T) {
	h := newHarness(t)
	a := h.agent("tg:*")
	b, _ := h.start(telegram.Options{})
	const group, user = -1007, 8
	toBot := telegramtest.Message(group, user, "and tomorrow?")
	toBot["reply_to_message"] = map[string]any{"message_id": 1, "date": 1, "chat": toBot["chat"], "text": "sunny",
		"from": map[string]any{"id": telegramtest.BotID, "is_bot": true, "first_name": "Bub"}}
	h.tg.Push(map[string]any{"message": toBot})
	if _, m := a.next(t); m["text"] != "and tomorrow?" || m["reply_to_message_id"] != 1.0 {
		t.Fatalf("reply to the bot forwarded as %v", m)
	}
	h.tg.Reply(group, user, 2, "a reply to someone else") // not addressed
	inThread := telegramtest.Message(group, user, "@bub_test_bot status?")
	inThread["message_thread_id"], inThread["is_topic_message"] = 4, true
	h.tg.Push(map[string]any{"message": inThread})
	if _, m := a.next(t); m["message_thread_id"] != 4.0 || m["chat_id"] != "-1007" {
		t.Fatalf("thread message forwarded as %v", m)
	}
	a.none(t, h.tg)
	if n := updates(t, b, "message", "not_mentioned"); n != 1 {
		t.Errorf("not_mentioned %v", n)
	}

	h.send("outbound:-1007", map[string]any{"type": "plaintext_message", "text": "all good"})
	if !h.tg.Wait(wait, func() bool { return len(h.tg.Sent()) == 1 }) {
		t.Fatal("reply not sent")
	}
	if m := h.tg.Sent()[0]; m.ChatID != group || m.MessageThreadID != 4 || m.Text != "all good" {
		t.Fatalf("reply sent as %+v, want chat %d thread 4", m, int64(group))
	}
}

func TestWebhook(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.agent("tg:*")
	b, err := telegram.New(&telegram.Options{Token: telegramtest.Token, APIURL: h.tg.APIURL(), BusURL: h.bus.URL, WebhookURL: "https://bot.example.org/tg", WebhookSecret: "s3cret_-", Logger: newLogger(h.logs)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-b.Ready()
	if url, secret := h.tg.Webhook(); url != "https://bot.example.org/tg" || secret != "s3cret_-" {
		t.Fatalf("webhook %q %q", url, secret)
	}
	post := func(secret, body string) int {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if secret != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	update := `{"update_id":77,"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"private"},"from":{"id":5,"first_name":"W"},"text":"via webhook"}}`
	if code := post("wrong", update); code != http.StatusForbidden {
		t.Fatalf("wrong secret: %d", code)
	}
	if code := post("", update); code != http.StatusUnauthorized {
		t.Fatalf("no secret: %d", code)
	}
	if n := metric(t, b, "bub_telegram_webhook_refused_total"); n != 2 {
		t.Fatalf("refused counted %v", n)
	}
	if code := post("s3cret_-", update); code != http.StatusOK {
		t.Fatalf("right secret: %d", code)
	}
	if _, m := a.next(t); m["text"] != "via webhook" {
		t.Fatalf("got %v", m)
	}
	// Telegram sending it again (it did not see our 200) is not a second
	// message.
	if code := post("s3cret_-", update); code != http.StatusOK {
		t.Fatalf("repeat: %d", code)
	}
	// The bridge answers a webhook request only once the bus has taken
	// the update, which is after the agent has: a forwarded repeat would
	// be waiting in a.ch by now.
	if n := metric(t, b, "bub_telegram_updates_total", "outcome", "duplicate"); n != 1 {
		t.Fatalf("duplicates counted %v, want 1", n)
	}
	select {
	case d := <-a.ch:
		t.Fatalf("repeat forwarded: %s", d.Payload)
	default:
	}
}

// A long reply whose second piece meets a 5xx is resumed, not re-sent
// from the start.
func TestOutboundResumesSplitReply(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(telegram.Options{})
	text := strings.Repeat("a", 4096) + "\n\n" + strings.Repeat("b", 4096) + "\n\n" + strings.Repeat("c", 100)
	go func() {
		h.tg.Wait(wait, func() bool { return len(h.tg.Sent()) == 1 })
		h.tg.Fail("sendMessage", telegramtest.Fault{Status: 502, Description: "Bad Gateway"})
	}()
	h.send("outbound:42", map[string]any{"type": "plaintext_message", "text": text})
	// Every piece is sent before the retry is answered as processed,
	// which ends the message's life on the bus.
	if !h.tg.Wait(wait, func() bool { return pending(t, h.bus) == 0 }) {
		t.Fatalf("the reply is still pending on the bus; %d pieces sent", len(h.tg.Sent()))
	}
	var firsts []string
	for _, m := range h.tg.Sent() {
		firsts = append(firsts, m.Text[:1])
	}
	if strings.Join(firsts, "") != "abc" {
		t.Fatalf("pieces sent: %v", firsts)
	}
}

// A reply made while the bridge is away, held by the bus (outbound:* in
// its hold patterns), reaches the chat once the bridge is back, once.
func TestReplyHeldWhileBridgeDown(t *testing.T) {
	t.Parallel()
	bs := bustest.Start(t, &bus.Options{RetryBaseDelay: 50 * time.Millisecond, HoldPatterns: []string{"outbound:*"}})
	h := &harness{t: t, bus: bs, tg: telegramtest.Start(t), logs: &syncBuffer{}}
	_, stop := h.start(telegram.Options{ClientID: "tg-bridge"})
	stop()
	// The bridge's close reaches the bus a moment after stop returns;
	// until the bus has dropped its subscription, a reply would be routed
	// to the closing bridge and retried rather than held.
	if !h.tg.Wait(wait, func() bool { return subscriptions(t, bs) == 0 }) {
		t.Fatal("the bus still holds the stopped bridge's subscription")
	}
	conn, err := peer.Dial(context.Background(), bs.URL, &peer.Options{NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := conn.SendMessage(context.Background(), "outbound:42", map[string]any{"type": "plaintext_message", "text": "made while away"}, nil)
	if err != nil || !res.Held {
		t.Fatalf("%+v %v", res, err)
	}
	h.start(telegram.Options{ClientID: "tg-bridge"})
	if !h.tg.Wait(wait, func() bool { return len(h.tg.SentTo(42)) == 1 }) {
		t.Fatal("held reply not sent")
	}
	// Sent before it is answered as processed, which ends its life on
	// the bus: nothing is left to send it again.
	if !h.tg.Wait(wait, func() bool { return pending(t, bs) == 0 }) {
		t.Fatal("the held reply is still pending on the bus after it was sent")
	}
	if n := len(h.tg.Sent()); n != 1 {
		t.Fatalf("sent %d times", n)
	}
}

// pending is the number of retries and holds bs keeps.
func pending(t *testing.T, bs *bustest.Server) int {
	t.Helper()
	n, err := bs.Store.CountPending()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// subscriptions reads the bus's bub_subscriptions gauge.
func subscriptions(t *testing.T, bs *bustest.Server) float64 {
	t.Helper()
	families, err := bs.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "bub_subscriptions" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no bub_subscriptions gauge")
	return -1
}
