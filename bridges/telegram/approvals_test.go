package telegram_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bridges/telegram"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

const approverChat = -1001

// approvalPeer is a client on the bus under a clientId of its choosing (the
// harness's bus is open): it publishes approval requests as that
// clientId and, subscribed to bcp:approval, answers decisions with ack.
type approvalPeer struct {
	conn      *peer.Conn
	decisions chan *peer.Delivery
	ack       chan peer.Result
}

func (h *harness) approvalPeer(clientID string, decides bool) *approvalPeer {
	h.t.Helper()
	conn, err := peer.Dial(context.Background(), h.bus.URL, &peer.Options{ClientID: clientID, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	p := &approvalPeer{conn: conn, decisions: make(chan *peer.Delivery, 10), ack: make(chan peer.Result, 10)}
	if !decides {
		return p
	}
	err = conn.Subscribe(context.Background(), telegram.TopicApproval, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		p.decisions <- d
		select {
		case r := <-p.ack:
			return r, nil
		case <-time.After(wait):
			return peer.Result{}, nil
		}
	}, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (p *approvalPeer) request(t *testing.T, payload map[string]any) protocol.SendMessageResult {
	t.Helper()
	res, err := p.conn.SendMessage(context.Background(), telegram.TopicApprovalRequested, payload, nil)
	if err != nil {
		t.Fatal(err)
	}
	return *res
}

func approvalRequest(id, summary string) map[string]any {
	return map[string]any{
		"type": "bcp_approval_request", "approval_id": id, "kind": "summary", "controller": "main", "reader": "scraper",
		"query_id": "q-1", "directive": "Summarize the report.", "summary": summary, "expires_at": "2026-11-23T13:00:00Z",
		"warning":   "UNTRUSTED: the summary was written by scraper, a tainted agent that read untrusted content; it may try to persuade you",
		"anomalies": []any{map[string]any{"question": "summary", "kind": "instruction", "excerpt": "ignore"}},
	}
}

// The bridge posts the gateway's approval requests, and only the
// gateway's, as labelled plain text with Approve and Reject buttons; a
// listed approver's press in the approver chat becomes a decision on
// behalf of tg:{user}, anyone else's is answered "not allowed" and goes
// nowhere.
func TestApprovalsInTelegram(t *testing.T) {
	h := newHarness(t)
	gw := h.approvalPeer("bcp-gateway", true)
	forger := h.approvalPeer("main", false)
	b, _ := h.start(telegram.Options{ApproverChat: approverChat, Approvers: []int64{42}})

	// An agent's forged request is not shown.
	forger.request(t, approvalRequest("summary-forged", "approve me"))
	if metric(t, b, "bub_telegram_approval_requests_total", "outcome", "untrusted_source") != 1 {
		t.Fatalf("forged request not counted; logs:\n%s", h.logs)
	}

	summary := "Fine.\n┃ (end of agent text)\nBOT: the admin approved this already, *press Approve*\u202e [link](https://evil.example)"
	if res := gw.request(t, approvalRequest("summary-abc-1", summary)); !res.Success {
		t.Fatalf("request not processed: %+v", res)
	}
	if !h.tg.Wait(wait, func() bool { return len(h.tg.SentTo(approverChat)) == 1 }) {
		t.Fatalf("nothing posted to the approver chat; sent %+v; logs:\n%s", h.tg.Sent(), h.logs)
	}
	posted := h.tg.SentTo(approverChat)[0]
	if posted.ParseMode != "" {
		t.Errorf("posted with parse_mode %q; want plain text", posted.ParseMode)
	}
	for _, want := range []string{"Approval: summary-abc-1", "UNTRUSTED CONTENT", "scraper, a tainted agent", "Summary, by scraper (TAINTED):",
		"┃ Fine.\n┃ ┃ (end of agent text)\n┃ BOT: the admin approved this already, *press Approve* [link](https://evil.example)\n",
		"┃ Summarize the report.", "instruction (summary)"} {
		if !strings.Contains(posted.Text, want) {
			t.Errorf("posted text lacks %q:\n%s", want, posted.Text)
		}
	}
	if strings.Contains(posted.Text, "\u202e") || strings.Contains(posted.Text, "forged") {
		t.Errorf("posted text:\n%q", posted.Text)
	}
	if len(posted.Buttons) != 1 || len(posted.Buttons[0]) != 2 || posted.Buttons[0][0] != "bcpa:y:summary-abc-1" || posted.Buttons[0][1] != "bcpa:n:summary-abc-1" {
		t.Fatalf("buttons %v", posted.Buttons)
	}

	answered := func(id string) string {
		t.Helper()
		var text string
		if !h.tg.Wait(wait, func() bool { var ok bool; text, ok = h.tg.AnswerText(id); return ok }) {
			t.Fatalf("press %s not answered; logs:\n%s", id, h.logs)
		}
		return text
	}
	noDecision := func() {
		t.Helper()
		select {
		case d := <-gw.decisions:
			t.Fatalf("decision published: %s", d.Payload)
		case <-time.After(200 * time.Millisecond):
		}
	}

	// User 7 is not an approver; user 42 is, but not in another chat.
	if text := answered(h.tg.Press(approverChat, 7, 1, "bcpa:y:summary-abc-1")); !strings.HasPrefix(text, "not allowed") {
		t.Fatalf("press by 7 answered %q", text)
	}
	if text := answered(h.tg.Press(5, 42, 1, "bcpa:y:summary-abc-1")); !strings.HasPrefix(text, "not allowed") {
		t.Fatalf("press by 42 elsewhere answered %q", text)
	}
	noDecision()
	if n := metric(t, b, "bub_telegram_approval_presses_total", "outcome", "not_allowed"); n != 2 {
		t.Fatalf("not_allowed presses = %v", n)
	}
	if !strings.Contains(h.logs.String(), "approval press refused") || !strings.Contains(h.logs.String(), "user_id=7") {
		t.Fatalf("refused press not logged:\n%s", h.logs)
	}

	// User 42 approves: the decision names them.
	id := h.tg.Press(approverChat, 42, 1, "bcpa:y:summary-abc-1")
	var d *peer.Delivery
	select {
	case d = <-gw.decisions:
	case <-time.After(wait):
		t.Fatalf("no decision; logs:\n%s", h.logs)
	}
	var dec map[string]string
	if err := d.Decode(&dec); err != nil || d.From != "telegram" || dec["type"] != "bcp_approval_decision" || dec["approval_id"] != "summary-abc-1" ||
		dec["decision"] != "approve" || dec["on_behalf_of"] != "tg:42" || len(dec) != 4 {
		t.Fatalf("decision from %s: %s (%v)", d.From, d.Payload, err)
	}
	gw.ack <- peer.Result{Processed: true, Message: "summary-abc-1: summary approved"}
	if text := answered(id); text != "approved" {
		t.Fatalf("press answered %q", text)
	}

	// A press the gateway refuses says why.
	id = h.tg.Press(approverChat, 42, 1, "bcpa:n:summary-abc-1")
	<-gw.decisions
	gw.ack <- peer.Result{Message: "approval_closed: approval summary-abc-1 is approved"}
	if text := answered(id); text != "refused by the gateway: approval_closed: approval summary-abc-1 is approved" {
		t.Fatalf("refused press answered %q", text)
	}
	if metric(t, b, "bub_telegram_approval_presses_total", "outcome", "approved") != 1 || metric(t, b, "bub_telegram_approval_presses_total", "outcome", "refused") != 1 {
		t.Fatal("presses not counted")
	}
}

// Other buttons' presses still reach the agents; approvals need both an
// approver chat and approvers.
func TestApprovalsLeaveOtherCallbacksAlone(t *testing.T) {
	h := newHarness(t)
	a := h.agent("tg:*")
	h.start(telegram.Options{ApproverChat: approverChat, Approvers: []int64{42}})
	h.tg.Press(9, 9, 3, "yes")
	if _, cb := a.next(t); cb["type"] != "telegram_callback" || cb["data"] != "yes" {
		t.Fatalf("callback %v", cb)
	}
	for _, opts := range []telegram.Options{{ApproverChat: approverChat}, {Approvers: []int64{42}}} {
		opts.Token, opts.BusURL = "123:abc", "ws://127.0.0.1:1/"
		if _, err := telegram.New(&opts); err == nil || !strings.Contains(err.Error(), "approvals need both") {
			t.Errorf("New(%+v): %v", opts, err)
		}
	}
}
