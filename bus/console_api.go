package bus

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/bus/store"
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

func subsOf(h *holding) []consoleSub {
	out := make([]consoleSub, 0, len(h.subs))
	for _, sub := range h.subs {
		out = append(out, consoleSub{Pattern: sub.pattern.String(), Policy: sub.policy, Fallback: sub.fallback, Rank: sub.seq})
	}
	slices.SortFunc(out, func(a, b consoleSub) int { return cmp.Compare(b.Rank, a.Rank) })
	return out
}

// allClients returns this node's initialized connections and the other
// nodes' connections that hold subscriptions.
func (s *Server) allClients() []consoleClient {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	out := make([]consoleClient, 0, len(conns))
	for _, c := range conns {
		c.activity.mu.Lock()
		inFlight := c.activity.inFlight
		c.activity.mu.Unlock()
		c.mu.Lock()
		if !c.initialized || c.closed {
			c.mu.Unlock()
			continue
		}
		since := c.since
		out = append(out, consoleClient{
			ClientID: c.clientID, Identity: c.identity, Node: s.cl.self, Local: true, Address: c.remote, Since: &since,
			PublishOnly: c.publishOnly, Subscriptions: subsOf(&c.holding), InFlight: inFlight, Requests: len(c.slots),
			Slow: c.slow.Load(), Timeouts: int(c.timeouts.Load()),
		})
		c.mu.Unlock()
	}
	cl := s.cl
	cl.mu.Lock()
	for _, in := range cl.remotes {
		in.mu.Lock()
		out = append(out, consoleClient{ClientID: in.clientID, Identity: in.identity, Node: in.peer.node, Subscriptions: subsOf(&in.holding)})
		in.mu.Unlock()
	}
	cl.mu.Unlock()
	return out
}

// consoleClients answers a page of the clients, sorted by clientId, those
// whose clientId, identity, node or address contains q.
func (s *Server) consoleClients(_ *consoleSession, w http.ResponseWriter, r *http.Request) {
	offset, limit, err := pageOf(r)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	q := strings.ToLower(r.URL.Query().Get("q"))
	all := s.allClients()
	matched := all[:0]
	for _, c := range all {
		if q == "" || strings.Contains(strings.ToLower(c.ClientID+"\x00"+c.Identity+"\x00"+c.Node+"\x00"+c.Address), q) {
			matched = append(matched, c)
		}
	}
	slices.SortFunc(matched, func(a, b consoleClient) int {
		return cmp.Or(cmp.Compare(a.ClientID, b.ClientID), cmp.Compare(a.Node, b.Node))
	})
	total := len(matched)
	matched = matched[min(offset, total):min(offset+limit, total)]
	writeJSON(w, http.StatusOK, map[string]any{"clients": matched, "total": total, "offset": offset, "node": s.cl.self})
}

// consoleCloseClient disconnects a client of this node.
func (s *Server) consoleCloseClient(sess *consoleSession, w http.ResponseWriter, r *http.Request) {
	var body struct {
		ClientID string `json:"clientId"`
	}
	if err := decodeConsoleBody(w, r, &body); err != nil {
		writeError(w, 0, err)
		return
	}
	s.mu.Lock()
	c := s.clients[body.ClientID]
	s.mu.Unlock()
	if c == nil {
		if remote := s.cl.remoteStandIns(body.ClientID); len(remote) > 0 {
			writeError(w, http.StatusConflict, protocol.Errorf(protocol.ErrInvalidParams,
				"client %q is connected to node %s: disconnect it from that node's console", body.ClientID, remote[0].peer.node))
			return
		}
		writeError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrNotFound, "no client %q is connected to this node", body.ClientID))
		return
	}
	s.log.Info("console: client disconnected by an operator", "client", body.ClientID, "operator", sess.identity)
	c.close(websocket.StatusPolicyViolation, closeByOperator)
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
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

// consoleChain answers the chain that would handle a topic now.
func (s *Server) consoleChain(_ *consoleSession, w http.ResponseWriter, r *http.Request) {
	topic := r.URL.Query().Get("topic")
	if err := protocol.ValidateTopic(topic); err != nil {
		writeError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "topic %q: %v", topic, err))
		return
	}
	chain := s.router.route(topic)
	links := make([]consoleLink, 0, len(chain))
	for _, sub := range chain {
		h := sub.to.held()
		h.mu.Lock()
		identity := h.identity
		h.mu.Unlock()
		node := s.cl.self
		if in, ok := sub.to.(*standIn); ok {
			node = in.peer.node
		}
		links = append(links, consoleLink{
			consoleSub: consoleSub{Pattern: sub.pattern.String(), Policy: sub.policy, Fallback: sub.fallback, Rank: sub.seq},
			ClientID:   h.clientID, Identity: identity, Node: node, MayStop: sub.policy.MayStop(),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"topic": topic, "chain": links, "held": s.holds(topic), "holdLifetime": s.opts.HoldLifetime.String(),
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

// consoleDeadLetters answers a page of the dead letters matching the
// filter, oldest first, and how many there are in all.
func (s *Server) consoleDeadLetters(_ *consoleSession, w http.ResponseWriter, r *http.Request) {
	f, err := deadLetterFilter(r)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	_, limit, err := pageOf(r)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	entries, next, err := s.store.ListDeadLetters(f, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, 0, storeError(err))
		return
	}
	total, err := s.store.CountDeadLetters()
	if err != nil {
		writeError(w, 0, storeError(err))
		return
	}
	list := make([]consoleDeadLetter, 0, len(entries))
	for _, d := range entries {
		wd := wireDeadLetter(d)
		n := len(wd.Payload)
		wd.Payload = nil
		list = append(list, consoleDeadLetter{DeadLetter: wd, PayloadBytes: n})
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": list, "next": next, "total": total})
}

// consoleDeadLetter answers one dead letter, payload and attempts
// included.
func (s *Server) consoleDeadLetter(_ *consoleSession, w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	d, err := s.store.GetDeadLetter(id)
	if err != nil {
		writeError(w, 0, deadLetterError(id, err))
		return
	}
	writeJSON(w, http.StatusOK, wireDeadLetter(d))
}

// consoleCountDeadLetters counts the dead letters matching the filter
// that died before now, which it answers as asOf: a purge given that
// asOf removes exactly those (fewer if some are replayed meanwhile),
// never one that died after the operator saw the count.
func (s *Server) consoleCountDeadLetters(_ *consoleSession, w http.ResponseWriter, r *http.Request) {
	f, err := deadLetterFilter(r)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	asOf := time.Now().UTC()
	f.Until = untilOf(f.Until, asOf)
	n := 0
	cursor := ""
	for {
		page, next, err := s.store.ListDeadLetters(f, cursor, maxListLimit)
		if err != nil {
			writeError(w, 0, storeError(err))
			return
		}
		n += len(page)
		if next == "" {
			break
		}
		cursor = next
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": n, "asOf": asOf.Format(time.RFC3339Nano)})
}

// untilOf is the earlier of until (zero: open) and asOf.
func untilOf(until, asOf time.Time) time.Time {
	if until.IsZero() || asOf.Before(until) {
		return asOf
	}
	return until
}

// consoleReplay replays dead letters to their topic or subscriber, as
// dlq.replay does.
func (s *Server) consoleReplay(sess *consoleSession, w http.ResponseWriter, r *http.Request) {
	var p protocol.DLQReplayParams
	if err := decodeConsoleBody(w, r, &p); err != nil {
		writeError(w, 0, err)
		return
	}
	to, err := replayTarget(p.To)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	if len(p.IDs) == 0 {
		writeError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "ids is required: name at least one dead letter"))
		return
	}
	if bound := s.limits().MaxReplayIDs; !under(len(p.IDs)-1, bound) {
		writeError(w, 0, s.limitReached(limitReplayIDs, "%d ids, more than %d; replay them in batches", len(p.IDs), bound))
		return
	}
	if err := s.beginRequest(); err != nil {
		writeError(w, 0, err)
		return
	}
	result := s.replayAll(p.IDs, to)
	s.requests.Done()
	s.log.Info("console: dead letters replayed", "ids", len(p.IDs), "to", to, "operator", sess.identity)
	writeJSON(w, http.StatusOK, result)
}

// consolePurge removes one dead letter by id, or those matching a filter
// that died before asOf, the moment the operator's count was taken.
func (s *Server) consolePurge(sess *consoleSession, w http.ResponseWriter, r *http.Request) {
	var body struct {
		ID     string    `json:"id"`
		Topic  string    `json:"topic"`
		Reason string    `json:"reason"`
		Since  time.Time `json:"since"`
		Until  time.Time `json:"until"`
		AsOf   time.Time `json:"asOf"`
	}
	if err := decodeConsoleBody(w, r, &body); err != nil {
		writeError(w, 0, err)
		return
	}
	var n int
	var err error
	switch {
	case body.ID != "":
		if err = s.store.RemoveDeadLetter(body.ID); err != nil {
			writeError(w, 0, deadLetterError(body.ID, err))
			return
		}
		n = 1
	case body.AsOf.IsZero():
		writeError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "a purge by filter needs asOf, from the count the operator confirmed"))
		return
	default:
		f := store.Filter{Topic: body.Topic, Reason: body.Reason, Since: body.Since, Until: untilOf(body.Until, body.AsOf)}
		if n, err = s.store.PurgeDeadLetters(f); err != nil {
			writeError(w, 0, storeError(err))
			return
		}
	}
	s.log.Info("console: dead letters purged", "purged", n, "operator", sess.identity)
	writeJSON(w, http.StatusOK, protocol.DLQPurgeResult{Purged: n})
}

// decodeConsoleBody reads a JSON body of at most 1 MiB into v.
func decodeConsoleBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(v); err != nil {
		return protocol.Errorf(protocol.ErrInvalidParams, "request body: %v", err)
	}
	return nil
}

// consoleApprovals asks the BCP gateway for its pending approvals, as
// bub bcp approvals list does; the answer is the gateway's own JSON.
func (s *Server) consoleApprovals(sess *consoleSession, w http.ResponseWriter, r *http.Request) {
	msg, err := s.askGateway(sess, r, map[string]string{"type": "bcp_approval_list"})
	if err != nil {
		writeError(w, 0, err)
		return
	}
	var list []json.RawMessage
	if err := json.Unmarshal([]byte(msg), &list); err != nil {
		writeError(w, http.StatusBadGateway, protocol.Errorf(protocol.ErrInternal, "the gateway's answer is not a list of approvals: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": list, "approver": s.consoleApprover(sess)})
}

// consoleDecide sends an approver's decision to the gateway.
func (s *Server) consoleDecide(sess *consoleSession, w http.ResponseWriter, r *http.Request) {
	var body struct {
		ApprovalID string `json:"approval_id"`
		Decision   string `json:"decision"`
		Reason     string `json:"reason,omitempty"`
		Summary    string `json:"summary,omitempty"`
	}
	if err := decodeConsoleBody(w, r, &body); err != nil {
		writeError(w, 0, err)
		return
	}
	if body.Decision != "approve" && body.Decision != "reject" && body.Decision != "edit" {
		writeError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "decision %q is not approve, reject or edit", body.Decision))
		return
	}
	payload := map[string]string{"type": "bcp_approval_decision", "approval_id": body.ApprovalID, "decision": body.Decision}
	if body.Reason != "" {
		payload["reason"] = body.Reason
	}
	if body.Summary != "" {
		payload["summary"] = body.Summary
	}
	msg, err := s.askGateway(sess, r, payload)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	s.log.Info("console: approval decided", "approval", body.ApprovalID, "decision", body.Decision, "operator", sess.identity)
	writeJSON(w, http.StatusOK, map[string]string{"answer": msg})
}

// consoleApprover is the clientId the console decides BCP approvals as:
// the credential's name, which the gateway's --approvers must list.
func (s *Server) consoleApprover(sess *consoleSession) string {
	if sess.identity == "" {
		return consoleClientID
	}
	return sess.identity
}

// askGateway publishes payload on bcp:approval as the session's
// credential and approver clientId (Publish: its grant, limits and
// checks), and returns the gateway's answer from its ack.
func (s *Server) askGateway(sess *consoleSession, r *http.Request, payload any) (string, error) {
	principal, err := s.principalOf(sess.cred)
	if err != nil {
		return "", err
	}
	clientID := s.consoleApprover(sess)
	access, err := s.Authorize(principal, clientID)
	if err != nil {
		return "", err
	}
	p := s.NewPublisher(clientID, "", r.RemoteAddr, "remote", r.RemoteAddr, "api", "console")
	p.SetGrant(principal, access)
	body, _ := json.Marshal(map[string]any{"topic": topicBCPApproval, "payload": payload})
	answer, err := s.Publish(r.Context(), p, body, &PublishOptions{Wait: true, Remote: r.RemoteAddr, Header: r.Header})
	if err != nil {
		return "", err
	}
	acks := answer.Result.Acks
	if len(acks) == 0 || acks[0].Error != "" {
		return "", protocol.Errorf(protocol.ErrNotFound, "no gateway answered on %s: is bub bcp gateway running, with %q in its --approvers?", topicBCPApproval, s.consoleApprover(sess))
	}
	if !acks[0].Processed {
		return "", protocol.Errorf(protocol.ErrForbidden, "the gateway refused: %s", acks[0].Message)
	}
	return acks[0].Message, nil
}

// consoleAgents answers the agents the spawner's events told of, by id.
func (s *Server) consoleAgents(_ *consoleSession, w http.ResponseWriter, _ *http.Request) {
	list := s.consoleState.agents.list()
	slices.SortFunc(list, func(a, b consoleAgent) int { return cmp.Compare(a.AgentID, b.AgentID) })
	writeJSON(w, http.StatusOK, map[string]any{"agents": list, "node": s.cl.self})
}
