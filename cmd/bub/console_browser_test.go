package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/bub-bus/bub/bcp/gateway"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/peer"
)

// hostileName is a clientId, and a payload, that would run script if
// the console put it in the page as HTML.
const hostileName = `<img/src=x/onerror=window.pwned=1>`

// consoleConfig is a bus config with an admin (alice, also the BCP
// approver), a credential without admin, the BCP agents and gateway of
// startBCPBus, and a client whose name is markup.
const consoleConfig = `auth:
  identities:
    - name: alice
      token_sha256: "%s"
      client_ids: ["alice"]
      admin: true
      publish: {allow: ["*"]}
      subscribe: {allow: ["*"]}
    - name: viewer
      token_sha256: "%s"
      client_ids: ["viewer"]
      publish: {allow: ["*"]}
      subscribe: {allow: ["*"]}
    - name: hostile
      token_sha256: "%s"
      client_ids: ["*"]
      publish: {allow: ["*"]}
      subscribe: {allow: ["orders:*", "dlq:*"]}
    - name: main
      token_sha256: "%s"
      client_ids: ["main"]
      publish: {allow: ["bcp:*"]}
      subscribe: {allow: ["agent:{{clientId}}"]}
    - name: researcher
      token_sha256: "%s"
      client_ids: ["researcher"]
      publish: {allow: ["bcp:*"]}
      subscribe: {allow: ["agent:{{clientId}}"]}
    - name: spawner
      token_sha256: "%s"
      client_ids: ["spawner"]
      publish: {allow: ["system:agent.*"]}
      subscribe: {allow: ["nothing:here"]}
    - name: bcp-gateway
      token_sha256: "%s"
      client_ids: ["bcp-gateway"]
      publish: {allow: ["agent:*", "bcp:approval.requested.*", "system:bcp.*"]}
      subscribe: {allow: ["bcp:*", "system:client.*"]}
`

// chromium returns the browser to drive, or skips the test with one
// line saying why it cannot.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skip("console browser test skipped: no chromium on PATH (apt-get install chromium)")
	return ""
}

// browserLog collects what the page reported: console errors and
// warnings, uncaught exceptions, and log entries (CSP violations among
// them).
type browserLog struct {
	mu       sync.Mutex
	problems []string
}

func (b *browserLog) add(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

func (b *browserLog) all() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// The console in Chromium against the real bub binary: a credential
// without admin is refused; the admin logs in; a client whose name is
// markup shows up as text; a topic's chain shows it; a dead letter is
// replayed to its topic and reaches the subscriber again; a BCP
// escalation is approved and reaches the Reader; and no console error
// or CSP violation happens on the way. With BUB_CONSOLE_SHOTS set
// (make console-shots), a screenshot of every page goes there.
func TestConsoleBrowser(t *testing.T) {
	browser := chromium(t)
	for _, name := range []string{"BUB_BUS_URL", "BUB_AGENT_ID", "BUB_CLIENT_ID", "BUB_TOKEN", "BUB_TOKEN_FILE", "BUB_BCP_AGENTS", "BUB_BCP_DATA_DIR", "BUB_BCP_CLIENT_ID"} {
		t.Setenv(name, "")
	}
	dir := t.TempDir()
	config := writeFile(t, dir, "bus.yaml", fmt.Sprintf(consoleConfig, hashToken("alice-token"), hashToken("viewer-token"),
		hashToken("hostile-token"), hashToken("main-token"), hashToken("researcher-token"), hashToken("spawner-token"), hashToken("gateway-token")))
	d := startBus(t, filepath.Join(dir, "data"), "--config", config)

	// The hostile client: its first delivery on dlq:* it rejects, so the
	// message is dead-lettered; a replay it takes.
	// The peers' calls share one deadline, as long as the test's browser
	// steps may take.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hostile, err := peer.Dial(ctx, d.url, &peer.Options{ClientID: hostileName, Token: "hostile-token", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer hostile.Close()
	replayed := make(chan *peer.Delivery, 4)
	var rejectedOnce sync.Once
	err = hostile.Subscribe(ctx, "dlq:*", func(_ context.Context, dl *peer.Delivery) (peer.Result, error) {
		first := false
		rejectedOnce.Do(func() { first = true })
		if first {
			return peer.Result{Reject: true, Message: "not today"}, nil
		}
		replayed <- dl
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := hostile.Subscribe(ctx, "orders:*", func(context.Context, *peer.Delivery) (peer.Result, error) {
		return peer.Result{Processed: true}, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := hostile.SendMessage(ctx, "dlq:test", map[string]string{"type": "test", "html": hostileName}, nil); err != nil {
		t.Fatal(err)
	}

	// A BCP escalation waiting for alice.
	agents := t.TempDir()
	writeFile(t, agents, "main.md", gatewayMain)
	writeFile(t, agents, "researcher.md", gatewayResearcher)
	runGateway(t, d.url, "--agents", agents, "--data-dir", t.TempDir(), "--approvers", "alice")
	_, mainInbox := dialAgent(t, d.url, "main")
	_, readerInbox := dialAgent(t, d.url, "researcher")
	nextOf(t, readerInbox, gateway.TypeSubscriptionsActive)
	spec := writeFile(t, t.TempDir(), "spec.json", `{"category": 3, "directive": "Summarize the page.", "max_words": 5}`)
	code, v := bcpCLI(t, d.url, "main", "bcp", "query", "--to", "researcher", "--spec", spec, "--justification", hostileName)
	if code != 0 || !v.OK {
		t.Fatalf("bcp query: exit %d, %+v", code, v)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 900))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	// chromedp logs the CDP events it does not know, which a newer
	// Chromium sends; they are not the page's problems.
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if !strings.HasPrefix(format, "unhandled") {
			t.Logf(format, args...)
		}
	}))
	defer bcancel()
	if err := chromedp.Run(bctx); err != nil {
		t.Skipf("console browser test skipped: chromium cannot start: %v", err)
	}
	var problems browserLog
	chromedp.ListenTarget(bctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems.add("console.%s: %s", ev.Type, strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			problems.add("exception: %s", ev.ExceptionDetails.Error())
		case *log.EventEntryAdded:
			// Chromium logs every API answer that is an error (the
			// probe for a session before login, the refused login),
			// which the page handles and shows; a static file's
			// failure still counts.
			if ev.Entry.Source == log.SourceNetwork && strings.Contains(ev.Entry.URL, "/console/api/") {
				return
			}
			if ev.Entry.Level == log.LevelError || ev.Entry.Level == log.LevelWarning || ev.Entry.Source == log.SourceSecurity {
				problems.add("log %s/%s: %s %s", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
			}
		}
	})
	shots := os.Getenv("BUB_CONSOLE_SHOTS")
	if shots != "" {
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			if shots == "" {
				return nil
			}
			var buf []byte
			if err := chromedp.FullScreenshot(&buf, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644)
		})
	}
	run := func(step string, actions ...chromedp.Action) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 60*time.Second)
		defer scancel()
		if err := chromedp.Run(sctx, actions...); err != nil {
			t.Fatalf("%s: %v; page problems: %q; bus: %s", step, err, problems.all(), d.stderr)
		}
	}
	// CSP violations are reported to the page too; the listener is added
	// before any of its scripts runs, outside the CSP.
	run("watch for CSP violations",
		log.Enable(), runtime.Enable(),
		chromedp.ActionFunc(func(ctx context.Context) error {
			_, err := page.AddScriptToEvaluateOnNewDocument(`window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => window.cspViolations.push(e.violatedDirective + " " + e.blockedURI));`).Do(ctx)
			return err
		}))

	textOf := func(sel string) string {
		t.Helper()
		var s string
		run("read "+sel, chromedp.Text(sel, &s, chromedp.ByQuery))
		return s
	}
	login := func(token string) {
		t.Helper()
		run("log in as "+token,
			chromedp.WaitVisible("#token", chromedp.ByQuery),
			chromedp.SetValue("#token", token, chromedp.ByQuery),
			chromedp.Click(`#login-form button[type=submit]`, chromedp.ByQuery))
	}

	run("open the console", chromedp.Navigate(d.http+"/console/"), chromedp.WaitVisible("#login", chromedp.ByQuery), shot("login"))

	// A credential without admin gets the Messages page alone.
	login("viewer-token")
	var navs int
	run("a read-only session", chromedp.WaitVisible("#page-messages", chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll('#nav a')].filter(a => !a.hidden).length`, &navs))
	if who := textOf("#who"); navs != 1 || !strings.Contains(who, "read-only") {
		t.Fatalf("a credential without admin: %d pages in the menu, %q", navs, who)
	}
	run("leave the read-only session", chromedp.Click("#logout", chromedp.ByQuery), chromedp.WaitVisible("#login", chromedp.ByQuery),
		chromedp.Navigate(d.http+"/console/#overview"), chromedp.WaitVisible("#login", chromedp.ByQuery))

	login("alice-token")
	run("overview", chromedp.WaitVisible("#page-overview", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector('[data-key=published] .value').textContent !== "–"`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		shot("overview"))

	// A client that connects while the page is open appears on it: the
	// stream's next sample refreshes the page.
	hasClient := func(id string) string {
		return `[...document.querySelectorAll('#clients-rows tr')].some(r => r.dataset.client === ` + jsString(id) + `)`
	}
	run("clients", chromedp.Navigate(d.http+"/console/#clients"),
		chromedp.Poll(hasClient(hostileName), nil, chromedp.WithPollingTimeout(30*time.Second)))
	spawner, err := peer.Dial(ctx, d.url, &peer.Options{ClientID: "spawner", Token: "spawner-token", PublishOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer spawner.Close()
	run("see a client appear", chromedp.Poll(hasClient("spawner"), nil, chromedp.WithPollingTimeout(30*time.Second)), shot("clients"))
	for _, ev := range []map[string]any{
		{"type": "agent_event", "event": "ready", "agent_id": "agent-7f3a", "topic": "tg:123", "workspace": "/data/workspaces/agent-7f3a", "pid": 4242, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)},
		{"type": "agent_event", "event": "hibernated", "agent_id": "agent-91bc", "topic": "tg:456", "reason": "idle", "timestamp": time.Now().UTC().Format(time.RFC3339Nano)},
		// Stopped by the spawner: no error to show in red.
		{"type": "agent_event", "event": "exited", "agent_id": "agent-c1ea", "topic": "tg:789", "status": "signal: terminated", "timestamp": time.Now().UTC().Format(time.RFC3339Nano)},
	} {
		if _, err := spawner.SendMessage(ctx, "system:agent."+ev["event"].(string), ev, nil); err != nil {
			t.Fatal(err)
		}
	}
	if rows := textOf("#clients-rows"); !strings.Contains(rows, hostileName) || !strings.Contains(rows, "dlq:*") {
		t.Fatalf("clients page lacks the hostile client as text: %q", rows)
	}

	run("topics", chromedp.Navigate(d.http+"/console/#topics"), chromedp.WaitVisible("#topic", chromedp.ByQuery),
		chromedp.SetValue("#topic", "orders:new", chromedp.ByQuery), chromedp.Click(`#topic-form button`, chromedp.ByQuery),
		chromedp.WaitVisible("#chain-list li", chromedp.ByQuery), shot("topics"))
	if chain := textOf("#chain-list"); !strings.Contains(chain, "orders:*") || !strings.Contains(chain, hostileName) || !strings.Contains(chain, "stopPropagationOnProcessed") {
		t.Fatalf("chain of orders:new: %q", chain)
	}

	// Messages: a message published with a correlation id is found by
	// its id, with its timeline, and by its correlation id; its payload
	// stays hidden, as this bus does not journal payloads; and a message
	// published while a topic is tailed appears in the tail.
	viewer, err := peer.Dial(ctx, d.url, &peer.Options{ClientID: "viewer", Token: "viewer-token", PublishOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	const secret = "payload-the-console-must-not-show"
	sent, err := viewer.SendMessage(ctx, "orders:new", map[string]string{"type": "order", "note": secret},
		&peer.SendOptions{Meta: map[string]string{"correlation_id": "conversation-42"}})
	if err != nil {
		t.Fatal(err)
	}
	hasRow := func(tbody, id string) string {
		return `[...document.querySelectorAll('` + tbody + ` tr')].some(r => r.dataset.id === ` + jsString(id) + `)`
	}
	run("messages: by id", chromedp.Navigate(d.http+"/console/#messages"), chromedp.WaitVisible("#msg-id", chromedp.ByQuery),
		chromedp.SetValue("#msg-id", sent.MessageID, chromedp.ByQuery), chromedp.Click(`#msg-form button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#timeline li[data-kind=delivery]`, chromedp.ByQuery), shot("messages"))
	if tl := textOf("#timeline"); !strings.Contains(tl, "accepted") || !strings.Contains(tl, "from viewer") ||
		!strings.Contains(tl, "chain: "+hostileName) || !strings.Contains(tl, "processed") {
		t.Fatalf("timeline of %s: %q", sent.MessageID, tl)
	}
	if card := textOf("#msg-timeline"); !strings.Contains(card, "not journaled") {
		t.Fatalf("timeline card says nothing of payloads: %q", card)
	}
	run("messages: by correlation id", chromedp.Evaluate(`document.querySelector('#msg-id').value = ""`, nil),
		chromedp.SetValue("#msg-corr", "conversation-42", chromedp.ByQuery), chromedp.Click(`#msg-form button[type=submit]`, chromedp.ByQuery),
		chromedp.Poll(hasRow("#msg-rows", sent.MessageID), nil, chromedp.WithPollingTimeout(30*time.Second)))
	run("messages: tail", chromedp.SetValue("#tail-topic", "orders:*", chromedp.ByQuery), chromedp.Click("#tail-start", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector('#tail-state').textContent.startsWith("following")`, nil, chromedp.WithPollingTimeout(30*time.Second)))
	tailed, err := viewer.SendMessage(ctx, "orders:tailed", map[string]string{"type": "order", "note": secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run("messages: see the tailed message", chromedp.Poll(hasRow("#tail-rows", tailed.MessageID), nil, chromedp.WithPollingTimeout(30*time.Second)),
		shot("messages-tail"))
	var body string
	run("read the whole page", chromedp.Evaluate(`document.body.textContent`, &body))
	if strings.Contains(body, secret) {
		t.Fatal("the Messages page shows a payload nobody asked for, on a bus that does not journal them")
	}

	run("dead letters", chromedp.Navigate(d.http+"/console/#deadletters"),
		chromedp.WaitVisible(`#dl-rows tr button.replay`, chromedp.ByQuery),
		chromedp.Click(`#dl-rows tr button`, chromedp.ByQuery), // Show
		chromedp.WaitVisible(`#dl-detail .card`, chromedp.ByQuery))
	run("show the payload", chromedp.Click(`#dl-detail button`, chromedp.ByQuery), chromedp.WaitVisible(`#dl-detail pre`, chromedp.ByQuery), shot("deadletters"))
	if payload := textOf("#dl-detail pre"); !strings.Contains(payload, hostileName) {
		t.Fatalf("payload shown as %q", payload)
	}
	run("replay", chromedp.Click(`#dl-rows tr button.replay`, chromedp.ByQuery), chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery),
		chromedp.Click("#confirm-ok", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector('#banner').textContent.startsWith("Replayed")`, nil, chromedp.WithPollingTimeout(30*time.Second)))
	select {
	case dl := <-replayed:
		if dl.Topic != "dlq:test" {
			t.Fatalf("replayed on %q", dl.Topic)
		}
	case <-time.After(bustest.Timeout):
		t.Fatal("the replayed dead letter did not reach its subscriber")
	}

	// The story of a message that was retried, then refused for good:
	// the Messages page lists it first, newest first, as dead-lettered;
	// its page tells each attempt with its answer and timing, the retry,
	// the dead letter with a link to it, and bub trace, in UTC times.
	err = hostile.Subscribe(ctx, "dlq:story", func(_ context.Context, dl *peer.Delivery) (peer.Result, error) {
		if dl.Attempt == 1 {
			return peer.Result{ShouldRetry: true, RetryAfter: 100 * time.Millisecond, Message: "busy"}, nil
		}
		return peer.Result{Reject: true, Message: "still busy"}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	story, err := viewer.SendMessage(ctx, "dlq:story", map[string]string{"type": "job"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitDeadLettered(t, d, "alice-token", story.MessageID)
	storyRow := `document.querySelector('#msg-rows tr')`
	run("messages: the newest first", chromedp.Navigate(d.http+"/console/#messages"),
		chromedp.Evaluate(`for (const f of ['#msg-id', '#msg-corr', '#msg-topic']) document.querySelector(f).value = ""`, nil),
		chromedp.Click(`#msg-form button[type=submit]`, chromedp.ByQuery),
		chromedp.Poll(storyRow+` !== null && `+storyRow+`.dataset.id === `+jsString(story.MessageID), nil, chromedp.WithPollingTimeout(30*time.Second)))
	if row := textOf("#msg-rows tr"); !strings.Contains(row, "dead lettered") || !strings.Contains(row, "dlq:story") || !strings.Contains(row, "viewer") {
		t.Fatalf("the newest message's row: %q", row)
	}
	run("messages: its story", chromedp.Click(`#msg-rows tr a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#timeline li[data-kind=dead_lettered]`, chromedp.ByQuery), shot("message-story"))
	var attempts, retries int
	run("count the attempts", chromedp.Evaluate(`document.querySelectorAll('#timeline li[data-kind=delivery]').length`, &attempts),
		chromedp.Evaluate(`document.querySelectorAll('#timeline li[data-kind=retry_scheduled]').length`, &retries))
	if attempts != 2 || retries != 1 {
		t.Fatalf("the story shows %d attempts and %d retries; want 2 and 1: %q", attempts, retries, textOf("#story"))
	}
	card := textOf("#story")
	for _, want := range []string{"dead lettered", "(rejected) after 2 attempts", "attempt 1 to " + hostileName, "not_processed (answered after", "retry_scheduled attempt 2", "rejected (answered after",
		"answered after", "bub trace " + story.MessageID, "bub dlq show d-", "chain: " + hostileName} {
		if !strings.Contains(card, want) {
			t.Errorf("the story lacks %q: %q", want, card)
		}
	}
	if !regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`).MatchString(textOf("#timeline")) {
		t.Errorf("the story's times are not UTC ISO 8601: %q", textOf("#timeline"))
	}
	var local string
	run("local time on hover", chromedp.Evaluate(`document.querySelector('#timeline time').title`, &local))
	if !strings.HasPrefix(local, "local: ") {
		t.Errorf("a time's title is %q; want the local time", local)
	}
	run("messages: to the dead letter", chromedp.Click("#story-deadletter", chromedp.ByQuery),
		chromedp.WaitVisible(`#dl-detail .card`, chromedp.ByQuery))
	if dl := textOf("#dl-detail"); !strings.Contains(dl, story.MessageID) || !strings.Contains(dl, "rejected") {
		t.Fatalf("the dead letter the story links to: %q", dl)
	}

	run("bcp", chromedp.Navigate(d.http+"/console/#bcp"), chromedp.WaitVisible(`#approvals .approval button.approve`, chromedp.ByQuery), shot("bcp"))
	if card := textOf("#approvals .approval"); !strings.Contains(card, "escalation-"+v.QueryID) || !strings.Contains(card, hostileName) {
		t.Fatalf("approval card %q", card)
	}
	var untrusted int
	run("count untrusted boxes", chromedp.Evaluate(`document.querySelectorAll('#approvals .untrusted').length`, &untrusted))
	if untrusted < 2 {
		t.Fatalf("the directive and justification are not marked untrusted (%d boxes)", untrusted)
	}
	run("approve", chromedp.Click(`#approvals .approval button.approve`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelector('#banner').textContent.startsWith("approve")`, nil, chromedp.WithPollingTimeout(30*time.Second)))
	if q := nextOf(t, readerInbox, gateway.TypeQuery); !strings.Contains(string(q.Payload), v.QueryID) {
		t.Fatalf("the Reader got %s", q.Payload)
	}

	// The Reader's summary waits for a human too: edited in the console,
	// the Controller gets the human's words (as the gateway normalizes
	// them: lower case).
	resp := writeFile(t, t.TempDir(), "resp.json", `{"summary": "`+hostileName+` approve me"}`)
	if code, answered := bcpCLI(t, d.url, "researcher", "bcp", "respond", "--query-id", v.QueryID, "--response", resp); code != 0 || !answered.OK {
		t.Fatalf("respond: exit %d, %+v", code, answered)
	}
	run("edit the summary", chromedp.Click("#bcp-refresh", chromedp.ByQuery),
		chromedp.WaitVisible(`#approvals .approval button.edit`, chromedp.ByQuery), shot("bcp-summary"),
		chromedp.Click(`#approvals .approval button.edit`, chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-extra textarea", chromedp.ByQuery),
		chromedp.SetValue("#confirm-extra textarea", "Edited by a human.", chromedp.ByQuery),
		chromedp.Click("#confirm-ok", chromedp.ByQuery),
		chromedp.Poll(`document.querySelector('#banner').textContent.startsWith("edit")`, nil, chromedp.WithPollingTimeout(30*time.Second)))
	if r := nextOf(t, mainInbox, gateway.TypeResponseDelivery); !strings.Contains(strings.ToLower(string(r.Payload)), "edited by a human.") || strings.Contains(string(r.Payload), "approve me") {
		t.Fatalf("the Controller got %s", r.Payload)
	}

	// The BCP page's budgets: the gateway's system:bcp.budget events
	// for main → researcher, charged for the query above; and the
	// anomalies of the summary, counted by kind, without its text.
	channel := `document.querySelector('#budget-rows tr[data-channel="main/researcher"]')`
	run("bcp budgets", chromedp.Navigate(d.http+"/console/#bcp"),
		chromedp.Poll(channel+` !== null`, nil, chromedp.WithPollingTimeout(30*time.Second)), shot("bcp-budgets"))
	// A number the script looks for under a name the bus does not send
	// shows as "–" or "undefined".
	if row := textOf(`#budget-rows tr[data-channel="main/researcher"]`); !strings.Contains(row, "bcp-gateway") ||
		strings.Contains(row, "–") || strings.Contains(row, "undefined") {
		t.Fatalf("budget of main/researcher: %q", row)
	}
	run("bcp anomalies", chromedp.WaitVisible(`#bcp-events tr[data-kind=anomaly]`, chromedp.ByQuery))
	if row := textOf(`#bcp-events tr[data-kind=anomaly]`); strings.Contains(row, "–") || strings.Contains(row, "undefined") {
		t.Fatalf("anomaly: %q", row)
	}
	if events := textOf("#budget-rows") + textOf("#bcp-events"); strings.Contains(events, "approve me") || strings.Contains(events, "pwned") {
		t.Fatalf("the budgets or events show the Reader's text: %q", events)
	}

	run("agents", chromedp.Navigate(d.http+"/console/#agents"), chromedp.WaitVisible("#agents-rows tr", chromedp.ByQuery), shot("agents"))
	if rows := textOf("#agents-rows"); !strings.Contains(rows, "agent-7f3a") || !strings.Contains(rows, "running") || !strings.Contains(rows, "hibernated") {
		t.Fatalf("agents page: %q", rows)
	}
	if row := textOf(`#agents-rows tr[data-agent="agent-c1ea"]`); !strings.Contains(row, "exited (clean)") {
		t.Fatalf("a cleanly stopped agent: %q", row)
	}
	var red int
	run("no red for a clean exit", chromedp.Evaluate(`document.querySelectorAll('#agents-rows tr[data-agent="agent-c1ea"] .tag.bad').length`, &red))
	if red != 0 {
		t.Fatal("a cleanly stopped agent is shown as an error")
	}

	var pwned bool
	var violations []string
	run("check the page", chromedp.Evaluate(`window.pwned === 1`, &pwned), chromedp.Evaluate(`window.cspViolations`, &violations))
	if pwned {
		t.Fatal("markup from a peer ran as script")
	}
	if len(violations) > 0 {
		t.Fatalf("CSP violations: %q", violations)
	}

	run("log out", chromedp.Click("#logout", chromedp.ByQuery), chromedp.WaitVisible("#login", chromedp.ByQuery),
		chromedp.Navigate(d.http+"/console/#clients"), chromedp.WaitVisible("#login", chromedp.ByQuery))
	if p := problems.all(); len(p) > 0 {
		t.Fatalf("the page reported problems: %q", p)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// waitDeadLettered waits until the bus's journal has dead-lettered
// message id, asking GET /v1/events with token; the test fails with the
// journal's last answer when that does not happen within bustest.Timeout.
func waitDeadLettered(t *testing.T, d *daemon, token, id string) {
	t.Helper()
	checkfor.Check(t, bustest.Timeout, func() error {
		req, err := http.NewRequest(http.MethodGet, d.http+"/v1/events?kind=dead_lettered&messageId="+url.QueryEscape(id), nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(body), `"kind":"dead_lettered"`) {
			return fmt.Errorf("message %s not dead-lettered; the journal said: %s", id, body)
		}
		return nil
	})
}
