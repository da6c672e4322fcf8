package telegram_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bub-bus/bub/bridges/telegram"
	"github.com/bub-bus/bub/bridges/telegram/telegramtest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

const wait = 20 * time.Second

// syncBuffer is a log sink safe for the bridge's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is a real bus, a fake Bot API, and bridges between them.
type harness struct {
	t    *testing.T
	bus  *bustest.Server
	tg   *telegramtest.Server
	logs *syncBuffer
}

func newHarness(t *testing.T) *harness {
	bs := bustest.Start(t, &bus.Options{RetryBaseDelay: 50 * time.Millisecond, MaxAttempts: 5})
	return &harness{t: t, bus: bs, tg: telegramtest.Start(t), logs: &syncBuffer{}}
}

// start runs a bridge with opts (Token, APIURL, BusURL filled in) until
// the returned stop is called or the test ends.
func (h *harness) start(opts telegram.Options) (*telegram.Bridge, func()) {
	h.t.Helper()
	opts.Token = telegramtest.Token
	opts.APIURL = h.tg.APIURL()
	opts.BusURL = h.bus.URL
	opts.PollTimeout = time.Second
	telegram.WithTimings(&opts, 50*time.Millisecond, 200*time.Millisecond)
	opts.Logger = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := telegram.New(&opts)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	select {
	case <-b.Ready():
	case err := <-done:
		h.t.Fatalf("bridge ended: %v", err)
	case <-time.After(wait):
		h.t.Fatal("bridge not ready")
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("Run: %v", err)
			}
		})
	}
	h.t.Cleanup(stop)
	return b, stop
}

// agent subscribes pattern on the bus and collects what arrives, answering
// processed.
type agent struct {
	conn *peer.Conn
	ch   chan *peer.Delivery
}

func (h *harness) agent(pattern string) *agent {
	h.t.Helper()
	conn, err := peer.Dial(context.Background(), h.bus.URL, &peer.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	a := &agent{conn: conn, ch: make(chan *peer.Delivery, 100)}
	if err := conn.Subscribe(context.Background(), pattern, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		a.ch <- d
		return peer.Result{Processed: true}, nil
	}, nil); err != nil {
		h.t.Fatal(err)
	}
	return a
}

func (a *agent) next(t *testing.T) (*peer.Delivery, map[string]any) {
	t.Helper()
	select {
	case d := <-a.ch:
		var m map[string]any
		if err := json.Unmarshal(d.Payload, &m); err != nil {
			t.Fatal(err)
		}
		return d, m
	case <-time.After(wait):
		t.Fatal("no delivery")
		return nil, nil
	}
}

// none checks that nothing more arrives while the bridge confirms every
// pending update.
func (a *agent) none(t *testing.T, tg *telegramtest.Server) {
	t.Helper()
	if !tg.Wait(wait, func() bool { return len(tg.Pending()) == 0 }) {
		t.Fatalf("updates %v never confirmed", tg.Pending())
	}
	select {
	case d := <-a.ch:
		t.Fatalf("unexpected delivery on %s: %s", d.Topic, d.Payload)
	default:
	}
}

func (h *harness) send(topic string, payload any) *protocol.SendMessageResult {
	h.t.Helper()
	conn, err := peer.Dial(context.Background(), h.bus.URL, &peer.Options{NoReconnect: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	res, err := conn.SendMessage(context.Background(), topic, payload, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if !res.Success {
		h.t.Fatalf("send to %s: %+v", topic, res)
	}
	return res
}

func TestInboundMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.agent("tg:*")
	h.start(telegram.Options{})
	h.tg.Push(map[string]any{"message": map[string]any{
		"message_id": 7, "date": 1700000000, "message_thread_id": 3,
		"chat": map[string]any{"id": 42, "type": "private"},
		"from": map[string]any{"id": 42, "first_name": "Ada", "last_name": "L", "username": "ada"},
		"text": "hello", "reply_to_message": map[string]any{"message_id": 5, "date": 1, "chat": map[string]any{"id": 42, "type": "private"}},
	}})
	d, m := a.next(t)
	if d.Topic != "tg:42" {
		t.Fatalf("topic %s", d.Topic)
	}
	want := map[string]any{"type": "telegram_message", "text": "hello", "from": "Ada L", "chat_id": "42", "timestamp": "2023-11-14T22:13:20Z",
		"message_id": 7.0, "user_id": 42.0, "username": "ada", "chat_type": "private", "reply_to_message_id": 5.0, "message_thread_id": 3.0, "kind": "text"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (payload %s)", k, m[k], v, d.Payload)
		}
	}
	if !h.tg.Wait(wait, func() bool { return len(h.tg.Actions()) > 0 }) {
		t.Fatal("no typing action")
	}
	if act := h.tg.Actions()[0]; act.ChatID != 42 || act.Action != "typing" {
		t.Fatalf("action %+v", act)
	}
}

func TestInboundMediaEditsCallbacksAndDrops(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.agent("tg:*")
	b, _ := h.start(telegram.Options{})
	chat := map[string]any{"id": 9, "type": "private"}
	from := map[string]any{"id": 9, "first_name": "Bo"}
	h.tg.Push(map[string]any{"message": map[string]any{"message_id": 1, "date": 1, "chat": chat, "from": from,
		"photo":   []any{map[string]any{"file_id": "small", "file_unique_id": "s", "width": 1, "height": 1}, map[string]any{"file_id": "big", "file_unique_id": "b", "width": 9, "height": 9}},
		"caption": "look"}})
	h.tg.Push(map[string]any{"edited_message": map[string]any{"message_id": 1, "date": 1, "edit_date": 2, "chat": chat, "from": from, "text": "fixed"}})
	h.tg.Push(map[string]any{"channel_post": map[string]any{"message_id": 1, "date": 1, "chat": map[string]any{"id": -5, "type": "channel"}, "text": "news"}})
	h.tg.Push(map[string]any{"message": map[string]any{"message_id": 2, "date": 1, "chat": chat, "from": from, "location": map[string]any{"latitude": 1, "longitude": 2}}})
	h.tg.Push(map[string]any{"callback_query": map[string]any{"id": "cb-1", "from": from, "chat_instance": "x", "data": "yes",
		"message": map[string]any{"message_id": 3, "date": 1, "chat": chat, "text": "choose"}}})

	_, photo := a.next(t)
	if photo["kind"] != "photo" || photo["file_id"] != "big" || photo["caption"] != "look" {
		t.Fatalf("photo %v", photo)
	}
	_, edit := a.next(t)
	if edit["type"] != "telegram_edited_message" || edit["text"] != "fixed" || edit["edit_date"] == nil {
		t.Fatalf("edit %v", edit)
	}
	_, cb := a.next(t)
	if cb["type"] != "telegram_callback" || cb["data"] != "yes" || cb["chat_id"] != "9" || cb["message_id"] != 3.0 {
		t.Fatalf("callback %v", cb)
	}
	if !slices.Contains(h.tg.Answered(), "cb-1") {
		t.Fatal("callback not answered")
	}
	a.none(t, h.tg)
	if n := updates(t, b, "channel_post", "unsupported"); n != 1 {
		t.Errorf("channel posts dropped: %v", n)
	}
	if n := updates(t, b, "message", "unsupported"); n != 1 {
		t.Errorf("locations dropped: %v", n)
	}
}

// metric reads a counter of the bridge: name with labels, 0 if absent.
func metric(t *testing.T, b *telegram.Bridge, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := b.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func updates(t *testing.T, b *telegram.Bridge, kind, outcome string) float64 {
	t.Helper()
	return metric(t, b, "bub_telegram_updates_total", "kind", kind, "outcome", outcome)
}

func newLogger(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func itoa(n int) string { return strconv.Itoa(n) }
