package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bcp/gateway"
	"github.com/bub-bus/bub/bridges/telegram/telegramtest"
	"github.com/bub-bus/bub/peer"
)

// approvalBridge runs bub telegram against a fake Bot API as the relay
// of BCP approvals for Telegram user 42 in chat -1001, and waits until it
// serves.
func approvalBridge(t *testing.T, url string) (*telegramtest.Server, *process) {
	t.Helper()
	tg := telegramtest.Start(t)
	bridge := startBub(t, []string{"BUB_BUS_URL=" + url, "BUB_TOKEN=telegram-token", "GORACE=atexit_sleep_ms=0",
		"BUB_TELEGRAM_TOKEN=" + telegramtest.Token, "BUB_TELEGRAM_API_URL=" + tg.URL},
		"telegram", "--poll-timeout", "1s", "--data-dir", filepath.Join(t.TempDir(), "tg"),
		"--allow-users", "99", "--approver-chat", "-1001", "--approvers", "42")
	require.Eventually(t, func() bool { return strings.Contains(bridge.stderr.String(), "telegram bridge ready") }, 20*time.Second, 20*time.Millisecond, "the bridge to be ready")
	return tg, bridge
}

// postedTo waits for the bridge's nth message to chat and returns it.
func postedTo(t *testing.T, tg *telegramtest.Server, bridge *process, chat int64, n int) telegramtest.Sent {
	t.Helper()
	if !tg.Wait(30*time.Second, func() bool { return len(tg.SentTo(chat)) >= n }) {
		t.Fatalf("approval request %d not posted; sent %+v; bridge:\n%s", n, tg.Sent(), bridge.stderr)
	}
	return tg.SentTo(chat)[n-1]
}

// A Category-3 query decided from Telegram: a bus with auth, bub bcp
// gateway with --relays telegram=42, and bub telegram as its own process
// against the fake Bot API. The escalation is posted to the approver
// chat; user 7's press is refused and nothing proceeds; user 42's
// approval sends the query to the Reader, and 42's rejection of the
// summary fails it for the Controller. The audit log names the human.
func TestTelegramApprovalsEndToEnd(t *testing.T) {
	const chat, approver, stranger = -1001, 42, 7
	url := startBCPBus(t)
	dir := t.TempDir()
	writeFile(t, dir, "main.md", gatewayMain)
	writeFile(t, dir, "researcher.md", gatewayResearcher)
	dataDir := t.TempDir()
	runGateway(t, url, "--agents", dir, "--data-dir", dataDir, "--relays", "telegram=42")
	_, mainInbox := dialAgent(t, url, "main")
	_, readerInbox := dialAgent(t, url, "researcher")
	nextOf(t, readerInbox, gateway.TypeSubscriptionsActive)

	tg, bridge := approvalBridge(t, url)

	posted := func(n int) telegramtest.Sent { t.Helper(); return postedTo(t, tg, bridge, chat, n) }
	answered := func(id string) string {
		t.Helper()
		var text string
		if !tg.Wait(30*time.Second, func() bool { var ok bool; text, ok = tg.AnswerText(id); return ok }) {
			t.Fatalf("press %s not answered; bridge:\n%s", id, bridge.stderr)
		}
		return text
	}

	spec := writeFile(t, t.TempDir(), "spec.json", `{"category": 3, "directive": "Summarize the page.", "max_words": 5}`)
	code, v := bcpCLI(t, url, "main", "bcp", "query", "--to", "researcher", "--spec", spec, "--justification", "no structure to ask about")
	if code != 0 || !v.OK {
		t.Fatalf("bcp query: exit %d, %+v", code, v)
	}
	esc := "escalation-" + v.QueryID
	req := posted(1)
	if req.ParseMode != "" || !strings.Contains(req.Text, "Approval: "+esc) || !strings.Contains(req.Text, "UNTRUSTED CONTENT") ||
		!strings.Contains(req.Text, "┃ Summarize the page.") || !strings.Contains(req.Text, "┃ no structure to ask about") {
		t.Fatalf("escalation posted as %q (parse mode %q)", req.Text, req.ParseMode)
	}
	if len(req.Buttons) != 1 || len(req.Buttons[0]) != 2 {
		t.Fatalf("buttons %v", req.Buttons)
	}
	approve, reject := req.Buttons[0][0], req.Buttons[0][1]

	// A stranger's press: refused, and the Reader sees nothing.
	if text := answered(tg.Press(chat, stranger, 1, approve)); !strings.HasPrefix(text, "not allowed") {
		t.Fatalf("press by %d answered %q", stranger, text)
	}
	select {
	case d := <-readerInbox:
		t.Fatalf("the Reader got %s after a stranger's press", d.Payload)
	case <-time.After(500 * time.Millisecond):
	}

	// The approver's press: the query reaches the Reader.
	if text := answered(tg.Press(chat, approver, 1, approve)); text != "approved" {
		t.Fatalf("press by %d answered %q; bridge:\n%s", approver, text, bridge.stderr)
	}
	if q := nextOf(t, readerInbox, gateway.TypeQuery); !strings.Contains(string(q.Payload), v.QueryID) {
		t.Fatalf("bcp_query %s", q.Payload)
	}

	// The summary goes to the chat, marked tainted; 42 rejects it.
	resp := writeFile(t, t.TempDir(), "resp.json", `{"summary": "*Approve* me, admin said so"}`)
	if code, answeredV := bcpCLI(t, url, "researcher", "bcp", "respond", "--query-id", v.QueryID, "--response", resp); code != 0 || !answeredV.OK {
		t.Fatalf("respond: exit %d, %+v", code, answeredV)
	}
	sum := posted(2)
	if !strings.Contains(sum.Text, "Summary, by researcher (TAINTED):\n┃ *approve* me, admin said so") || sum.ParseMode != "" {
		t.Fatalf("summary posted as %q", sum.Text)
	}
	if text := answered(tg.Press(chat, approver, 2, sum.Buttons[0][1])); text != "rejected" {
		t.Fatalf("reject answered %q", text)
	}
	d := nextOf(t, mainInbox, gateway.TypeQueryFailed)
	if !strings.Contains(string(d.Payload), gateway.CodeApprovalRejected) {
		t.Fatalf("bcp_query_failed %s", d.Payload)
	}
	// The escalation is closed: a late press says so.
	if text := answered(tg.Press(chat, approver, 1, reject)); !strings.HasPrefix(text, "refused by the gateway: approval_closed") {
		t.Fatalf("late press answered %q", text)
	}

	records, err := gateway.ReadAudit(dataDir, func(r *gateway.AuditRecord) bool { return r.Event == "approval" })
	if err != nil {
		t.Fatal(err)
	}
	var byHuman int
	for _, r := range records {
		if r.From == "telegram" && r.OnBehalfOf == "tg:42" && r.Outcome == "ok" {
			byHuman++
		}
	}
	if byHuman != 2 {
		t.Fatalf("audit: %d decisions by tg:42 via telegram, want 2: %+v", byHuman, records)
	}
	code, out, stderr := runCLI(t.Context(), "", "bcp", "audit", "--data-dir", dataDir)
	if code != 0 || !strings.Contains(out, "tg:42 via telegram") {
		t.Fatalf("bub bcp audit: exit %d, %s %s", code, out, stderr)
	}
}

// Two approvers' clients in one deployment: alice's own client on the
// bus (deciding with bub bcp approvals) and bub telegram, a relay. Each
// hears every request and every closing, whoever subscribed last (on one
// shared topic the newest subscription would shadow the other); a
// decision from either side closes the approval for both.
func TestTelegramAndCLIApproversTogether(t *testing.T) {
	const chat, approver = -1001, 42
	url := startBCPBus(t)
	dir := t.TempDir()
	writeFile(t, dir, "main.md", gatewayMain)
	writeFile(t, dir, "researcher.md", gatewayResearcher)
	runGateway(t, url, "--agents", dir, "--data-dir", t.TempDir(), "--approvers", "alice", "--relays", "telegram=42")
	_, readerInbox := dialAgent(t, url, "researcher")
	nextOf(t, readerInbox, gateway.TypeSubscriptionsActive)

	// alice's client subscribes first, the bridge after it.
	alice, err := peer.Dial(t.Context(), url, &peer.Options{ClientID: "alice", Token: "alice-token", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alice.Close() })
	aliceInbox := make(chan *peer.Delivery, 16)
	err = alice.Subscribe(t.Context(), gateway.ApprovalTopic("alice"), func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		aliceInbox <- d
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg, bridge := approvalBridge(t, url)

	aliceGets := func(typ, approvalID string) {
		t.Helper()
		d := nextOf(t, aliceInbox, typ)
		if d.From != "bcp-gateway" || !strings.Contains(string(d.Payload), `"approval_id":"`+approvalID+`"`) {
			t.Fatalf("alice got %s from %s, want %s of %s", d.Payload, d.From, typ, approvalID)
		}
	}
	escalate := func() string {
		t.Helper()
		spec := writeFile(t, t.TempDir(), "spec.json", `{"category": 3, "directive": "Summarize the page.", "max_words": 2}`)
		code, v := bcpCLI(t, url, "main", "bcp", "query", "--to", "researcher", "--spec", spec, "--justification", "no structure to ask about")
		if code != 0 || !v.OK {
			t.Fatalf("bcp query: exit %d, %+v", code, v)
		}
		return "escalation-" + v.QueryID
	}
	posted := func(n int) telegramtest.Sent { t.Helper(); return postedTo(t, tg, bridge, chat, n) }
	closedInChat := func(n int, label string) {
		t.Helper()
		if !tg.Wait(30*time.Second, func() bool {
			edits := tg.Edits()
			return len(edits) >= n && edits[n-1].Labels[0][0] == label
		}) {
			t.Fatalf("closing %d not shown as %q; edits %+v; bridge:\n%s", n, label, tg.Edits(), bridge.stderr)
		}
	}

	// The first escalation reaches both; alice approves it from the CLI,
	// and the chat shows who did.
	first := escalate()
	aliceGets(gateway.TypeApprovalRequest, first)
	if req := posted(1); !strings.Contains(req.Text, "Approval: "+first) {
		t.Fatalf("posted %q, want %s", req.Text, first)
	}
	t.Setenv("BUB_TOKEN", "alice-token")
	if code, out, stderr := runCLI(t.Context(), "", "bcp", "approvals", "approve", first, "--client-id", "alice"); code != 0 || !strings.Contains(out, `"ok":true`) {
		t.Fatalf("approve from the CLI: exit %d, %s %s", code, out, stderr)
	}
	nextOf(t, readerInbox, gateway.TypeQuery)
	aliceGets(gateway.TypeApprovalClosed, first)
	closedInChat(1, "Approved by alice")

	// The second reaches both too; 42 rejects it in Telegram, and alice's
	// client hears it closed.
	second := escalate()
	aliceGets(gateway.TypeApprovalRequest, second)
	req := posted(2)
	if text := tg.Press(chat, approver, 2, req.Buttons[0][1]); !tg.Wait(30*time.Second, func() bool { a, ok := tg.AnswerText(text); return ok && a == "rejected" }) {
		t.Fatalf("reject in Telegram not answered; bridge:\n%s", bridge.stderr)
	}
	aliceGets(gateway.TypeApprovalClosed, second)
	closedInChat(2, "Rejected by tg:42 via telegram")
	t.Setenv("BUB_TOKEN", "alice-token")
	if code, out, stderr := runCLI(t.Context(), "", "bcp", "approvals", "list", "--client-id", "alice"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("approvals list: exit %d, %q %s", code, out, stderr)
	}
}
