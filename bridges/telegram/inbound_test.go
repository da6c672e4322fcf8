package telegram_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bridges/telegram"
	"github.com/bub-bus/bub/bridges/telegram/telegramtest"
)

func TestAllowListsAndGroupMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.agent("tg:*")
	b, _ := h.start(telegram.Options{AllowChats: []int64{-100}, AllowUsers: []int64{7}})
	h.tg.Text(8, 8, "stranger in private")            // refused
	h.tg.Text(-200, 8, "stranger in another group")   // refused
	h.tg.Text(-100, 8, "chatter without mention")     // allowed group, not addressed
	h.tg.Text(-100, 8, "hey @Bub_Test_Bot what's up") // addressed
	h.tg.Text(7, 7, "allowed user in private")
	_, m1 := a.next(t)
	_, m2 := a.next(t)
	got := []string{m1["text"].(string), m2["text"].(string)}
	if !strings.Contains(strings.Join(got, "|"), "what's up") || !strings.Contains(strings.Join(got, "|"), "allowed user") {
		t.Fatalf("forwarded %v", got)
	}
	a.none(t, h.tg)
	if n := updates(t, b, "message", "not_allowed"); n != 2 {
		t.Errorf("not_allowed %v", n)
	}
	if n := updates(t, b, "message", "not_mentioned"); n != 1 {
		t.Errorf("not_mentioned %v", n)
	}
	if !strings.Contains(h.logs.String(), "not on the allow-lists") {
		t.Error("refusal not logged")
	}

	// --group-mode all forwards the group's chatter.
	h2 := newHarness(t)
	a2 := h2.agent("tg:*")
	h2.start(telegram.Options{GroupMode: telegram.GroupModeAll})
	h2.tg.Text(-100, 8, "chatter")
	if _, m := a2.next(t); m["text"] != "chatter" || m["chat_type"] != "supergroup" {
		t.Fatalf("got %v", m)
	}
}

// A message the bus does not take (nobody serves tg:*) is tried again,
// and reaches the agent once there is one; the update is not confirmed
// to Telegram meanwhile.
func TestUnacceptedMessageRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b, _ := h.start(telegram.Options{})
	id := h.tg.Text(42, 42, "anyone there?")
	if !h.tg.Wait(wait, func() bool { return metric(t, b, "bub_telegram_bus_retries_total") >= 2 }) {
		t.Fatal("no retries")
	}
	if p := h.tg.Pending(); len(p) != 1 || p[0] != id {
		t.Fatalf("pending %v: confirmed before the bus took it", p)
	}
	a := h.agent("tg:*")
	if _, m := a.next(t); m["text"] != "anyone there?" {
		t.Fatalf("got %v", m)
	}
	a.none(t, h.tg)
}

// A restart of the bridge neither loses nor repeats: messages forwarded
// before it are not forwarded again, messages that arrived while it was
// down are.
func TestRestartNeitherLosesNorRepeats(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.agent("tg:*")
	dir := t.TempDir()
	_, stop := h.start(telegram.Options{DataDir: dir})
	h.tg.Text(1, 1, "one")
	h.tg.Text(2, 2, "two")
	a.next(t)
	a.next(t)
	a.none(t, h.tg)
	stop()
	h.tg.Text(1, 1, "three")
	h.tg.Text(2, 2, "four")
	h.start(telegram.Options{DataDir: dir})
	seen := map[string]bool{}
	for range 2 {
		_, m := a.next(t)
		seen[m["text"].(string)] = true
	}
	if !seen["three"] || !seen["four"] {
		t.Fatalf("after restart %v", seen)
	}
	a.none(t, h.tg)
}

// The update ids recorded as forwarded keep a restart from repeating an
// update whose batch was not confirmed to Telegram before the stop.
func TestRecordedUpdatesNotRepeated(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.agent("tg:*")
	dir := t.TempDir()
	done := h.tg.Text(1, 1, "already forwarded")
	h.tg.Text(1, 1, "new")
	state := `{"offset":0,"recent":[` + itoa(done) + `]}`
	if err := os.WriteFile(filepath.Join(dir, "telegram-state.json"), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := h.start(telegram.Options{DataDir: dir})
	if _, m := a.next(t); m["text"] != "new" {
		t.Fatalf("got %v", m)
	}
	a.none(t, h.tg)
	if n := updates(t, b, "message", "duplicate"); n != 1 {
		t.Fatalf("duplicates %v", n)
	}
}

func TestDamagedStateRefused(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "telegram-state.json"), []byte("{not json"), 0o600)
	_, err := telegram.New(&telegram.Options{Token: telegramtest.Token, BusURL: "ws://127.0.0.1:1/", DataDir: dir})
	if err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("err %v", err)
	}
}

// The token is in every Bot API URL; it must not reach a log or an
// error when the API cannot be reached or refuses it.
func TestTokenNeverLogged(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	down := telegramtest.Start(t)
	down.Close() // connection refused, with the token in the URL
	b, err := telegram.New(telegram.WithTimings(&telegram.Options{Token: telegramtest.Token, APIURL: down.URL, BusURL: h.bus.URL,
		Logger: newLogger(h.logs)}, 0, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := b.Run(ctx); err != nil && strings.Contains(err.Error(), telegramtest.Token) {
		t.Fatalf("error has the token: %v", err)
	}
	if !strings.Contains(h.logs.String(), "cannot reach the Bot API") || !strings.Contains(h.logs.String(), "<bot-token>") {
		t.Fatalf("logs: %s", h.logs)
	}
	wrong := "987654321:ZZbbCCddEEffGGhhIIjjKKllMMnnOOppQQr"
	b, _ = telegram.New(&telegram.Options{Token: wrong, APIURL: h.tg.APIURL(), BusURL: h.bus.URL, Logger: newLogger(h.logs)})
	err = b.Run(context.Background())
	if err != telegram.ErrTokenRefused || strings.Contains(err.Error(), wrong) {
		t.Fatalf("wrong token: %v", err)
	}
	if strings.Contains(h.logs.String(), telegramtest.Token) || strings.Contains(h.logs.String(), wrong) {
		t.Fatalf("token logged: %s", h.logs)
	}
	_, err = telegram.New(&telegram.Options{Token: "not-a-token-secret", BusURL: h.bus.URL})
	if err == nil || strings.Contains(err.Error(), "not-a-token-secret") {
		t.Fatalf("malformed token: %v", err)
	}
}

// The fake takes sendMessage as multipart too, as a bot sending files
// would post it.
func TestFakeAcceptsMultipart(t *testing.T) {
	tg := telegramtest.Start(t)
	body := "--b\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n42\r\n--b\r\nContent-Disposition: form-data; name=\"text\"\r\n\r\nmulti\r\n--b--\r\n"
	resp, err := http.Post(tg.URL+"/bot"+telegramtest.Token+"/sendMessage", "multipart/form-data; boundary=b", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := tg.Sent(); resp.StatusCode != 200 || len(s) != 1 || s[0].Text != "multi" || s[0].ChatID != 42 || !s[0].Multipart {
		t.Fatalf("%d %+v", resp.StatusCode, s)
	}
}
