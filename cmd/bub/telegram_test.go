package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bridges/telegram/telegramtest"
	"github.com/bub-bus/bub/spawner"
)

// telegramStack is bub serve and bub spawner with the echo agent, as
// separate processes, and a fake Bot API in the test.
type telegramStack struct {
	bus *daemon
	tg  *telegramtest.Server
	sp  *process
	env []string
}

func startTelegramStack(t *testing.T) *telegramStack {
	t.Helper()
	agentBin, err := echoAgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	// outbound:* held too, so that a reply made while the bridge
	// restarts waits for it.
	d := startBus(t, t.TempDir(), "--retry-base-delay", "100ms", "--hold-patterns", "agent:*,outbound:*")
	env := []string{"BUB_BUS_URL=" + d.url, "GORACE=atexit_sleep_ms=0"}
	sp := startBub(t, env, "spawner", "--command", agentBin, "--workspace-root", filepath.Join(t.TempDir(), "ws"), "--spawn-timeout", "10s")
	require.Eventually(t, func() bool { return strings.Contains(sp.stderr.String(), "spawner serving") }, 20*time.Second, 20*time.Millisecond, "the spawner to serve")
	return &telegramStack{bus: d, tg: telegramtest.Start(t), sp: sp, env: env}
}

// bridge starts bub telegram against the fake and waits until it polls.
func (s *telegramStack) bridge(t *testing.T, args ...string) *process {
	t.Helper()
	env := append(append([]string{}, s.env...), "BUB_TELEGRAM_TOKEN="+telegramtest.Token, "BUB_TELEGRAM_API_URL="+s.tg.URL)
	p := startBub(t, env, append([]string{"telegram", "--poll-timeout", "1s"}, args...)...)
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), "telegram bridge ready") }, 20*time.Second, 20*time.Millisecond, "the bridge to be ready")
	return p
}

// stop ends p with SIGTERM and waits for it.
func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exited with %v: %s", err, p.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("did not stop on SIGTERM: %s", p.stderr)
	}
}

// replied waits for a message to chat with text.
func (s *telegramStack) replied(t *testing.T, chat int64, text string) telegramtest.Sent {
	t.Helper()
	var found telegramtest.Sent
	if !s.tg.Wait(30*time.Second, func() bool {
		for _, m := range s.tg.SentTo(chat) {
			if m.Text == text {
				found = m
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no %q in chat %d; sent: %+v", text, chat, s.tg.Sent())
	}
	return found
}

// TestTelegramEndToEnd: fake Telegram → bub telegram → bus → bub spawner →
// echo agent → bus → bub telegram → fake Telegram, for two private chats
// at once, a group, a stranger, a 429, a long reply and a restart of the
// bridge mid-conversation.
func TestTelegramEndToEnd(t *testing.T) {
	s := startTelegramStack(t)
	dataDir := t.TempDir()
	args := []string{"--data-dir", dataDir, "--allow-users", "11,12", "--allow-chats", "-100500"}
	bridge := s.bridge(t, args...)

	s.tg.Text(11, 11, "hello from 11")
	s.tg.Text(12, 12, "hello from 12")
	s.tg.Text(-100500, 13, "chatter the bot should not read")
	s.tg.Text(-100500, 13, "@bub_test_bot hi group")
	s.tg.Text(99, 99, "let me in")
	s.replied(t, 11, "echo: hello from 11")
	s.replied(t, 12, "echo: hello from 12")
	s.replied(t, -100500, "echo: @bub_test_bot hi group")
	typing := false
	for _, a := range s.tg.Actions() {
		typing = typing || (a.ChatID == 11 && a.Action == "typing")
	}
	if !typing {
		t.Errorf("chat 11 never showed typing: %+v", s.tg.Actions())
	}

	// 429: the reply waits for Telegram's retry_after.
	s.tg.Fail("sendMessage", telegramtest.Fault{Status: 429, Description: "Too Many Requests: retry after 1", RetryAfter: 1})
	start := time.Now()
	s.tg.Text(11, 11, "second")
	if m := s.replied(t, 11, "echo: second"); m.At.Sub(start) < time.Second {
		t.Errorf("sent %v after the message, before Telegram's retry_after", m.At.Sub(start))
	}

	// A reply over Telegram's limit arrives in pieces.
	long := strings.TrimSpace(strings.Repeat("many words ", 600))
	s.tg.Text(12, 12, long)
	if !s.tg.Wait(30*time.Second, func() bool { return len(s.tg.SentTo(12)) == 3 }) {
		t.Fatalf("long reply: %d messages to chat 12", len(s.tg.SentTo(12)))
	}
	pieces := s.tg.SentTo(12)[1:]
	if got := pieces[0].Text + " " + pieces[1].Text; got != "echo: "+long {
		t.Errorf("pieces do not add up to the reply: %d + %d chars", len(pieces[0].Text), len(pieces[1].Text))
	}

	// Restart mid-conversation: what arrives while the bridge is down
	// is forwarded once it is back, and nothing before is repeated.
	if !s.tg.Wait(30*time.Second, func() bool { return len(s.tg.Pending()) == 0 }) {
		t.Fatalf("updates never confirmed: %v", s.tg.Pending())
	}
	bridge.stop(t)
	s.tg.Text(11, 11, "while the bridge was down")
	s.tg.Text(12, 12, "me too")
	s.bridge(t, args...)
	s.replied(t, 11, "echo: while the bridge was down")
	s.replied(t, 12, "echo: me too")
	if !s.tg.Wait(30*time.Second, func() bool { return len(s.tg.Pending()) == 0 }) {
		t.Fatalf("updates never confirmed: %v", s.tg.Pending())
	}
	// A repeat would go round the spawner and agent ahead of a message
	// sent after it on the same path: the bridge forwards Telegram's
	// updates in order, and hands a held reply over when it subscribes,
	// before replies made later. So once a last message to each chat is
	// answered, any repeat has been sent too.
	s.tg.Text(11, 11, "last to 11")
	s.tg.Text(12, 12, "last to 12")
	s.replied(t, 11, "echo: last to 11")
	s.replied(t, 12, "echo: last to 12")
	count := map[string]int{}
	for _, m := range s.tg.Sent() {
		count[m.Text]++
	}
	for text, n := range count {
		if n != 1 {
			t.Errorf("%q sent %d times", text, n)
		}
	}
	if len(s.tg.SentTo(99)) != 0 || strings.Contains(s.sp.stderr.String(), "tg:99") {
		t.Errorf("the stranger got through: %+v", s.tg.SentTo(99))
	}
	if strings.Contains(bridge.stderr.String(), telegramtest.Token) {
		t.Error("the bridge logged the bot token")
	}
}

// TestTelegramWebhook: bub telegram --webhook-url registers the webhook
// with its secret, refuses requests without it, and forwards the rest.
func TestTelegramWebhook(t *testing.T) {
	s := startTelegramStack(t)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("hook_Secret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	s.bridge(t, "--webhook-url", "https://bot.example.org/tg/hook", "--listen", addr, "--webhook-secret-file", secretFile, "--data-dir", t.TempDir())
	if url, secret := s.tg.Webhook(); url != "https://bot.example.org/tg/hook" || secret != "hook_Secret-1" {
		t.Fatalf("webhook set to %q with secret %q", url, secret)
	}
	post := func(secret string) int {
		body := `{"update_id":5,"message":{"message_id":1,"date":1,"chat":{"id":21,"type":"private"},"from":{"id":21,"first_name":"W"},"text":"by webhook"}}`
		req, _ := http.NewRequest("POST", "http://"+addr+"/tg/hook", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("guessed"); code != http.StatusForbidden {
		t.Fatalf("wrong secret answered %d", code)
	}
	if code := post("hook_Secret-1"); code != http.StatusOK {
		t.Fatalf("right secret answered %d", code)
	}
	s.replied(t, 21, "echo: by webhook")
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "bub_telegram_webhook_refused_total 1") {
		t.Errorf("refusal not counted:\n%s", metrics)
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("healthz: %v %v", resp, err)
	}
}

// TestTelegramTokenStaysSecret: the bot token is never in --help, and a
// bad one is refused without being printed.
func TestTelegramTokenStaysSecret(t *testing.T) {
	env := []string{"BUB_TELEGRAM_TOKEN=" + telegramtest.Token}
	help, stderr, code := bub(t, env, "", "telegram", "--help")
	if code != 0 || strings.Contains(help+stderr, telegramtest.Token) || !strings.Contains(help, "BUB_TELEGRAM_TOKEN") {
		t.Fatalf("--help: exit %d\n%s%s", code, help, stderr)
	}
	_, stderr, code = bub(t, []string{"BUB_TELEGRAM_TOKEN=secret-but-malformed"}, "", "telegram", "--data-dir", t.TempDir())
	if code != 1 || strings.Contains(stderr, "secret-but-malformed") || !strings.Contains(stderr, "BotFather") {
		t.Fatalf("malformed token: exit %d: %s", code, stderr)
	}
	_, stderr, code = bub(t, []string{"BUB_TELEGRAM_TOKEN="}, "", "telegram")
	if code != 2 || !strings.Contains(stderr, "no bot token") {
		t.Fatalf("no token: exit %d: %s", code, stderr)
	}
	tg := telegramtest.Start(t)
	wrong := "987654321:ZZbbCCddEEffGGhhIIjjKKllMMnnOOppQQr"
	_, stderr, code = bub(t, []string{"BUB_TELEGRAM_TOKEN=" + wrong}, "", "telegram", "--api-url", tg.URL, "--data-dir", t.TempDir())
	if code != 1 || strings.Contains(stderr, wrong) || !strings.Contains(stderr, "refused the bot token") {
		t.Fatalf("refused token: exit %d: %s", code, stderr)
	}
}

// TestTelegramGuide runs the guide's "Talk to your agents from
// Telegram" commands as written, in a directory with bin/bub and
// bin/echo-agent, against the fake Bot API: the environment points the
// bus at a free port and the bridge at the fake, as a user's points it at
// api.telegram.org.
func TestTelegramGuide(t *testing.T) {
	section := guideSection(t, "05-telegram.md", "## Talk to your agents from Telegram")
	var commands [][]string
	var userID string
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		for _, line := range strings.Split(block, "\n") {
			line, _, _ = strings.Cut(line, "#")
			if words, err := spawner.SplitCommand(line); err == nil && len(words) > 0 && words[0] == "bin/bub" {
				commands = append(commands, words[1:])
				for i, w := range words {
					if w == "--allow-users" {
						userID = words[i+1]
					}
				}
			}
		}
	}
	if len(commands) != 3 || commands[0][0] != "serve" || commands[1][0] != "spawner" || commands[2][0] != "telegram" || userID == "" {
		t.Fatalf("guide commands: %q", commands)
	}
	agentBin, err := echoAgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "bin"), 0o755)
	for name, target := range map[string]string{"bub": bubBinary, "echo-agent": agentBin} {
		if err := os.Symlink(target, filepath.Join(dir, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	// The commands' relative paths (bin/bub, data/workspaces) are
	// relative to the clone, here dir.
	t.Chdir(dir)
	tg := telegramtest.Start(t)
	addr := freeAddr(t)
	env := []string{"BUB_LISTEN=" + addr, "BUB_BUS_URL=ws://" + addr + "/", "GORACE=atexit_sleep_ms=0",
		"BUB_TELEGRAM_TOKEN=" + telegramtest.Token, "BUB_TELEGRAM_API_URL=" + tg.URL}
	var procs []*process
	for _, args := range commands {
		p := startBub(t, env, args...)
		procs = append(procs, p)
		want := map[string]string{"serve": "bus listening", "spawner": "spawner serving", "telegram": "telegram bridge ready"}[args[0]]
		require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), want) }, 20*time.Second, 20*time.Millisecond, "bub "+args[0])
	}
	var id int64
	for _, c := range userID {
		id = id*10 + int64(c-'0')
	}
	tg.Text(id, id, "hi")
	if !tg.Wait(30*time.Second, func() bool { m := tg.SentTo(id); return len(m) == 1 && m[0].Text == "echo: hi" }) {
		t.Fatalf("no echo: sent %+v; bridge: %s", tg.Sent(), procs[2].stderr)
	}
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "data", "telegram", "telegram-state.json"))
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "the offset in the guide's --data-dir")
}
