package console

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/httpjson"
	"github.com/bub-bus/bub/protocol"
)

// The console's views of the bus and its actions. Every list is paged
// and filtered here, so a bus with 10,000 clients or 100,000 dead
// letters sends the browser one page.

const (
	// maxConsolePage bounds a page of clients or dead letters.
	maxConsolePage = 500
	// closeByOperator closes a connection an operator disconnected from
	// the console.
	closeByOperator = "disconnected by an operator"
	// consoleClientID is the clientId the console publishes BCP
	// decisions as on an open bus; with auth, it is the logged-in
	// credential's name.
	consoleClientID = "console"
	// topicBCPApproval is where BCP approvers send decisions and lists
	// (bcp/gateway.TopicApproval, which the bus does not import).
	topicBCPApproval = "bcp:approval"
	// countPage is the page a count of dead letters reads at a time:
	// dlq.list's largest.
	countPage = 1000
)

// pageOf reads offset and limit (default 100, at most maxConsolePage).
func pageOf(r *http.Request) (offset, limit int, err error) {
	q := r.URL.Query()
	limit = 100
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxConsolePage {
			return 0, 0, protocol.Errorf(protocol.ErrInvalidParams, "limit %q is not a number from 1 to %d", v, maxConsolePage)
		}
	}
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			return 0, 0, protocol.Errorf(protocol.ErrInvalidParams, "offset %q is not a number from 0", v)
		}
	}
	return offset, limit, nil
}

// consoleSub is one subscription as the console shows it.
type consoleSub struct {
	Pattern  string          `json:"pattern"`
	Policy   protocol.Policy `json:"policy"`
	Fallback bool            `json:"fallback"`
	// Rank is its place in the cluster's order: a higher one is newer
	// and comes first in a chain.
	Rank uint64 `json:"rank"`
}

// consoleClient is one connection as the console shows it. A client on
// another node of a cluster is known here only by the subscriptions it
// holds (its stand-in): its address, age, requests and slowness are its
// node's to show.
type consoleClient struct {
	ClientID      string       `json:"clientId"`
	Identity      string       `json:"identity"`
	Node          string       `json:"node"`
	Local         bool         `json:"local"`
	Address       string       `json:"address,omitempty"`
	Since         *time.Time   `json:"since,omitempty"`
	PublishOnly   bool         `json:"publishOnly,omitempty"`
	Subscriptions []consoleSub `json:"subscriptions"`
	// InFlight counts the deliveries to it awaiting its answer;
	// Requests its own requests running.
	InFlight int  `json:"inFlight"`
	Requests int  `json:"requests"`
	Slow     bool `json:"slow"`
	Timeouts int  `json:"timeouts"`
}

func subsOf(subs []bus.Subscription) []consoleSub {
	out := make([]consoleSub, 0, len(subs))
	for _, sub := range subs {
		out = append(out, consoleSub{Pattern: sub.Pattern, Policy: sub.Policy, Fallback: sub.Fallback, Rank: sub.Rank})
	}
	return out
}

// allClients returns this node's initialized connections and the other
// nodes' connections that hold subscriptions, as the core's snapshot
// has them.
func (c *console) allClients() []consoleClient {
	all := c.bus.Clients()
	out := make([]consoleClient, 0, len(all))
	for _, cl := range all {
		cc := consoleClient{ClientID: cl.ClientID, Identity: cl.Identity, Node: cl.Node, Local: cl.Local, Subscriptions: subsOf(cl.Subscriptions)}
		if cl.Local {
			since := cl.Since
			cc.Address, cc.Since, cc.PublishOnly = cl.Address, &since, cl.PublishOnly
			cc.InFlight, cc.Requests, cc.Slow, cc.Timeouts = cl.InFlight, cl.Requests, cl.Slow, cl.Timeouts
		}
		out = append(out, cc)
	}
	return out
}

// clients answers a page of the clients, sorted by clientId, those
// whose clientId, identity, node or address contains q.
func (c *console) clients(_ *session, w http.ResponseWriter, r *http.Request) {
	offset, limit, err := pageOf(r)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	q := strings.ToLower(r.URL.Query().Get("q"))
	all := c.allClients()
	matched := all[:0]
	for _, cl := range all {
		if q == "" || strings.Contains(strings.ToLower(cl.ClientID+"\x00"+cl.Identity+"\x00"+cl.Node+"\x00"+cl.Address), q) {
			matched = append(matched, cl)
		}
	}
	slices.SortFunc(matched, func(a, b consoleClient) int {
		return cmp.Or(cmp.Compare(a.ClientID, b.ClientID), cmp.Compare(a.Node, b.Node))
	})
	total := len(matched)
	matched = matched[min(offset, total):min(offset+limit, total)]
	httpjson.Write(w, http.StatusOK, map[string]any{"clients": matched, "total": total, "offset": offset, "node": c.bus.Status().Node})
}

// closeClient disconnects a client of this node.
func (c *console) closeClient(sess *session, w http.ResponseWriter, r *http.Request) {
	var body struct {
		ClientID string `json:"clientId"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	if ok, node := c.bus.Disconnect(body.ClientID, closeByOperator); !ok {
		if node != "" {
			httpjson.WriteError(w, http.StatusConflict, protocol.Errorf(protocol.ErrInvalidParams,
				"client %q is connected to node %s: disconnect it from that node's console", body.ClientID, node))
			return
		}
		httpjson.WriteError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrNotFound, "no client %q is connected to this node", body.ClientID))
		return
	}
	c.log.Info("console: client disconnected by an operator", "client", body.ClientID, "operator", sess.identity)
	httpjson.Write(w, http.StatusOK, map[string]bool{"ok": true})
}

// consoleLink is one subscription of a topic's chain.
type consoleLink struct {
	consoleSub
	ClientID string `json:"clientId"`
	Identity string `json:"identity"`
	Node     string `json:"node"`
	// MayStop says the walk may end at this subscriber, by its policy.
	MayStop bool `json:"mayStop"`
}

// chain answers the chain that would handle a topic now.
func (c *console) chain(_ *session, w http.ResponseWriter, r *http.Request) {
	topic := r.URL.Query().Get("topic")
	if err := protocol.ValidateTopic(topic); err != nil {
		httpjson.WriteError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "topic %q: %v", topic, err))
		return
	}
	route := c.bus.Route(topic)
	links := make([]consoleLink, 0, len(route.Chain))
	for _, l := range route.Chain {
		links = append(links, consoleLink{
			consoleSub: consoleSub{Pattern: l.Pattern, Policy: l.Policy, Fallback: l.Fallback, Rank: l.Rank},
			ClientID:   l.ClientID, Identity: l.Identity, Node: l.Node, MayStop: l.Policy.MayStop(),
		})
	}
	httpjson.Write(w, http.StatusOK, map[string]any{
		"topic": topic, "chain": links, "held": route.Held, "holdLifetime": route.HoldLifetime.String(),
	})
}

// deadLetterFilter reads a dead-letter filter from the query.
func deadLetterFilter(r *http.Request) (store.Filter, error) {
	q := r.URL.Query()
	f := store.Filter{Topic: q.Get("topic"), Reason: q.Get("reason")}
	for name, t := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
		if v := q.Get(name); v != "" {
			var err error
			if *t, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return f, protocol.Errorf(protocol.ErrInvalidParams, "%s %q is not an RFC 3339 time", name, v)
			}
		}
	}
	return f, nil
}

// consoleDeadLetter is a dead letter in a list: its payload is left out
// (the browser asks for one entry to see it).
type consoleDeadLetter struct {
	protocol.DeadLetter
	PayloadBytes int `json:"payloadBytes"`
}

// deadLetters answers a page of the dead letters matching the
// filter, oldest first, and how many there are in all.
func (c *console) deadLetters(_ *session, w http.ResponseWriter, r *http.Request) {
	f, err := deadLetterFilter(r)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	_, limit, err := pageOf(r)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	entries, next, err := c.bus.DeadLetterQueue().List(f, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	total, err := c.bus.DeadLetterQueue().Count()
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	list := make([]consoleDeadLetter, 0, len(entries))
	for _, wd := range entries {
		n := len(wd.Payload)
		wd.Payload = nil
		list = append(list, consoleDeadLetter{DeadLetter: wd, PayloadBytes: n})
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"entries": list, "next": next, "total": total})
}

// deadLetter answers one dead letter, payload and attempts
// included.
func (c *console) deadLetter(_ *session, w http.ResponseWriter, r *http.Request) {
	d, err := c.bus.DeadLetterQueue().Get(r.URL.Query().Get("id"))
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	httpjson.Write(w, http.StatusOK, d)
}

// countDeadLetters counts the dead letters matching the filter
// that died before now, which it answers as asOf: a purge given that
// asOf removes exactly those (fewer if some are replayed meanwhile),
// never one that died after the operator saw the count.
func (c *console) countDeadLetters(_ *session, w http.ResponseWriter, r *http.Request) {
	f, err := deadLetterFilter(r)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	asOf := time.Now().UTC()
	f.Until = untilOf(f.Until, asOf)
	n := 0
	cursor := ""
	for {
		page, next, err := c.bus.DeadLetterQueue().List(f, cursor, countPage)
		if err != nil {
			httpjson.WriteError(w, 0, err)
			return
		}
		n += len(page)
		if next == "" {
			break
		}
		cursor = next
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"count": n, "asOf": asOf.Format(time.RFC3339Nano)})
}

// untilOf is the earlier of until (zero: open) and asOf.
func untilOf(until, asOf time.Time) time.Time {
	if until.IsZero() || asOf.Before(until) {
		return asOf
	}
	return until
}

// replay replays dead letters to their topic or subscriber, as
// dlq.replay does.
func (c *console) replay(sess *session, w http.ResponseWriter, r *http.Request) {
	var p protocol.DLQReplayParams
	if err := decodeBody(w, r, &p); err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	result, err := c.bus.DeadLetterQueue().Replay(p.IDs, p.To)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	c.log.Info("console: dead letters replayed", "ids", len(p.IDs), "to", cmp.Or(p.To, protocol.ReplayToTopic), "operator", sess.identity)
	httpjson.Write(w, http.StatusOK, result)
}

// purge removes one dead letter by id, or those matching a filter
// that died before asOf, the moment the operator's count was taken.
func (c *console) purge(sess *session, w http.ResponseWriter, r *http.Request) {
	var body struct {
		ID     string    `json:"id"`
		Topic  string    `json:"topic"`
		Reason string    `json:"reason"`
		Since  time.Time `json:"since"`
		Until  time.Time `json:"until"`
		AsOf   time.Time `json:"asOf"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	var f store.Filter
	if body.ID == "" {
		if body.AsOf.IsZero() {
			httpjson.WriteError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "a purge by filter needs asOf, from the count the operator confirmed"))
			return
		}
		f = store.Filter{Topic: body.Topic, Reason: body.Reason, Since: body.Since, Until: untilOf(body.Until, body.AsOf)}
	}
	n, err := c.bus.DeadLetterQueue().Purge(body.ID, f)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	c.log.Info("console: dead letters purged", "purged", n, "operator", sess.identity)
	httpjson.Write(w, http.StatusOK, protocol.DLQPurgeResult{Purged: n})
}

// decodeBody reads a JSON body of at most 1 MiB into v.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(v); err != nil {
		return protocol.Errorf(protocol.ErrInvalidParams, "request body: %v", err)
	}
	return nil
}

// approvals asks the BCP gateway for its pending approvals, as
// bub bcp approvals list does; the answer is the gateway's own JSON.
func (c *console) approvals(sess *session, w http.ResponseWriter, r *http.Request) {
	msg, err := c.askGateway(sess, r, map[string]string{"type": "bcp_approval_list"})
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	var list []json.RawMessage
	if err := json.Unmarshal([]byte(msg), &list); err != nil {
		httpjson.WriteError(w, http.StatusBadGateway, protocol.Errorf(protocol.ErrInternal, "the gateway's answer is not a list of approvals: %v", err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"approvals": list, "approver": approver(sess)})
}

// decide sends an approver's decision to the gateway.
func (c *console) decide(sess *session, w http.ResponseWriter, r *http.Request) {
	var body struct {
		ApprovalID string `json:"approval_id"`
		Decision   string `json:"decision"`
		Reason     string `json:"reason,omitempty"`
		Summary    string `json:"summary,omitempty"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	if body.Decision != "approve" && body.Decision != "reject" && body.Decision != "edit" {
		httpjson.WriteError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "decision %q is not approve, reject or edit", body.Decision))
		return
	}
	payload := map[string]string{"type": "bcp_approval_decision", "approval_id": body.ApprovalID, "decision": body.Decision}
	if body.Reason != "" {
		payload["reason"] = body.Reason
	}
	if body.Summary != "" {
		payload["summary"] = body.Summary
	}
	msg, err := c.askGateway(sess, r, payload)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	c.log.Info("console: approval decided", "approval", body.ApprovalID, "decision", body.Decision, "operator", sess.identity)
	httpjson.Write(w, http.StatusOK, map[string]string{"answer": msg})
}

// approver is the clientId the console decides BCP approvals as:
// the credential's name, which the gateway's --approvers must list.
func approver(sess *session) string {
	if sess.identity == "" {
		return consoleClientID
	}
	return sess.identity
}

// askGateway publishes payload on bcp:approval as the session's
// credential, through the HTTP API's path (its grant, limits and
// checks), and returns the gateway's answer from its ack.
func (c *console) askGateway(sess *session, r *http.Request, payload any) (string, error) {
	p, err := c.bus.PublisherFor(sess.cred, approver(sess), r.RemoteAddr)
	if err != nil {
		return "", err
	}
	body, _ := json.Marshal(map[string]any{"topic": topicBCPApproval, "payload": payload})
	answer, err := c.bus.Publish(r.Context(), p, body, &bus.PublishOptions{Wait: true, Remote: r.RemoteAddr, Header: r.Header})
	if err != nil {
		return "", err
	}
	acks := answer.Result.Acks
	if len(acks) == 0 || acks[0].Error != "" {
		return "", protocol.Errorf(protocol.ErrNotFound, "no gateway answered on %s: is bub bcp gateway running, with %q in its --approvers?", topicBCPApproval, approver(sess))
	}
	if !acks[0].Processed {
		return "", protocol.Errorf(protocol.ErrForbidden, "the gateway refused: %s", acks[0].Message)
	}
	return acks[0].Message, nil
}

// agentList answers the agents the spawner's events told of, by id.
func (c *console) agentList(_ *session, w http.ResponseWriter, _ *http.Request) {
	list := c.agents.list()
	slices.SortFunc(list, func(a, b consoleAgent) int { return cmp.Compare(a.AgentID, b.AgentID) })
	httpjson.Write(w, http.StatusOK, map[string]any{"agents": list, "node": c.bus.Status().Node})
}
