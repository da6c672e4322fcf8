package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/protocol"
)

// Each node keeps its own journal, in memory (docs/OPERATIONS.md,
// "Message journal"). A page of it asked of a node of a cluster is the
// whole cluster's: the node asks every live node, and every node its
// cursor names, for the same page (bus.Server.Survey, over NATS to
// bub.node.<node>.survey.journal), with the reader's rights as this node
// decided them, and merges the answers by time. A node that does not
// answer in time is named in the page's Missing instead of failing it.
// Streams (/v1/events/stream, the console's live tail) stay per node.

// journalNodeTimeout bounds the wait for the other nodes' pages: a node
// that takes longer is reported missing.
const journalNodeTimeout = 3 * time.Second

// maxCursorNodes bounds the nodes a cluster's cursor names.
const maxCursorNodes = 64

// nodeCursors is a cluster's page cursor: each node's own cursor
// (BOOT.SEQUENCE), by node id, written "node:BOOT.SEQ,node:BOOT.SEQ" in
// node order. A cursor of one node (no ':'), as a single bus gives and
// as each event carries, is kept under "" and stands for every node:
// the node it came from goes on after it, the others read it as 0.
type nodeCursors map[string]string

// parseNodeCursors reads a cursor of a cluster's page, or of one node.
func parseNodeCursors(c string) (nodeCursors, error) {
	m := nodeCursors{}
	if c == "" {
		return m, nil
	}
	if !strings.Contains(c, ":") {
		if _, _, ok := splitCursor(c); !ok {
			return nil, fmt.Errorf("cursor %q is not one this API gave (BOOT.SEQUENCE, or NODE:BOOT.SEQUENCE,...)", c)
		}
		m[""] = c
		return m, nil
	}
	for entry := range strings.SplitSeq(c, ",") {
		node, cur, ok := strings.Cut(entry, ":")
		if !ok || !protocol.ValidNodeID(node) {
			return nil, fmt.Errorf("cursor %q: entry %q is not NODE:BOOT.SEQUENCE", c, entry)
		}
		if _, _, ok := splitCursor(cur); !ok || strings.ContainsAny(cur, ":,") {
			return nil, fmt.Errorf("cursor %q: node %s's cursor %q is not BOOT.SEQUENCE", c, node, cur)
		}
		if _, dup := m[node]; dup {
			return nil, fmt.Errorf("cursor %q names node %s twice", c, node)
		}
		if len(m) == maxCursorNodes {
			return nil, fmt.Errorf("cursor %q names more than %d nodes", c, maxCursorNodes)
		}
		m[node] = cur
	}
	return m, nil
}

// String writes the cursor; a cursor of one node only as it is.
func (m nodeCursors) String() string {
	if c, ok := m[""]; ok && len(m) == 1 {
		return c
	}
	var b strings.Builder
	for _, node := range slices.Sorted(maps.Keys(m)) {
		if node == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(node)
		b.WriteByte(':')
		b.WriteString(m[node])
	}
	return b.String()
}

// of is node's cursor: its own, else the one node's cursor that stands
// for all, else "" (from its oldest event).
func (m nodeCursors) of(node string) string {
	if c, ok := m[node]; ok {
		return c
	}
	return m[""]
}

// clusterSearch is what the other nodes of a cluster are asked for a
// page: the query, and where each node is.
type clusterSearch struct {
	cursors nodeCursors
	// query is the page's query string without after, its times made
	// absolute (a node's "15m ago" would be counted from its own
	// clock, and later).
	query string
}

// absoluteTimes returns v's query string with since and until as the
// times q holds.
func absoluteTimes(v url.Values, q *journalQuery) string {
	v = maps.Clone(v)
	if v.Has("since") {
		v.Set("since", q.since.Format(time.RFC3339Nano))
	}
	if v.Has("until") {
		v.Set("until", q.until.Format(time.RFC3339Nano))
	}
	return v.Encode()
}

// journalSearch is a page one node asks another for.
type journalSearch struct {
	// Query is the query string as /v1/events takes it, with the
	// answering node's own cursor as after.
	Query        string `json:"query"`
	HidePayloads bool   `json:"hidePayloads,omitempty"`
	// Everything says the reader sees every topic (an admin, an open
	// bus); else Reader is what it may subscribe to, and none means
	// nothing: a search that forgot the rules shows no event.
	Everything bool            `json:"everything,omitempty"`
	Reader     *auth.ReadRules `json:"reader,omitempty"`
}

// journalAnswer is a node's answer to a journalSearch.
type journalAnswer struct {
	Page  *protocol.JournalPage `json:"page,omitempty"`
	Error string                `json:"error,omitempty"`
}

// clusterPage answers the page req asks for from every node; ctx is
// the request's.
func (jn *Journal) clusterPage(ctx context.Context, req *eventsRequest) (protocol.JournalPage, error) {
	cs := req.cluster
	search := journalSearch{HidePayloads: req.q.hidePayloads, Everything: req.q.reader == nil}
	if req.q.reader != nil {
		rules := req.q.reader.ReadRules()
		search.Reader = &rules
	}
	self := jn.s.Status().Node
	nodes := slices.Clone(jn.s.LiveNodes())
	for node := range cs.cursors {
		if node != "" && !slices.Contains(nodes, node) {
			// Its events were in earlier pages: gone now, it is
			// missing, not silently left out.
			nodes = append(nodes, node)
		}
	}
	if !slices.Contains(nodes, self) {
		nodes = append(nodes, self)
	}
	slices.Sort(nodes)
	type nodePage struct {
		page  protocol.JournalPage
		err   error
		taken int
	}
	pages := make([]nodePage, len(nodes))
	ctx, cancel := context.WithTimeout(ctx, journalNodeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, node := range nodes {
		ns := search
		ns.Query = cs.query
		if c := cs.cursors.of(node); c != "" {
			if ns.Query != "" {
				ns.Query += "&"
			}
			ns.Query += "after=" + url.QueryEscape(c)
		}
		if node == self {
			pages[i].page, pages[i].err = jn.search(&ns)
			continue
		}
		wg.Go(func() { pages[i].page, pages[i].err = jn.ask(ctx, node, &ns) })
	}
	wg.Wait()

	var out protocol.JournalPage
	for i, node := range nodes {
		if node == self && pages[i].err != nil {
			// This node's own answer fails only on the query: the
			// cursor.
			return out, pages[i].err
		}
	}
	// Each node's page is in its order, which is its time order; the
	// first limit events of the cluster are among the first limit of
	// their nodes. Ties go to the node first by name, so that the
	// order is the same on every ask.
	for len(out.Events) < req.limit {
		best := -1
		for i := range pages {
			p := &pages[i]
			if p.err != nil || p.taken == len(p.page.Events) {
				continue
			}
			if best < 0 || p.page.Events[p.taken].Time.Before(pages[best].page.Events[pages[best].taken].Time) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		p := &pages[best]
		out.Events = append(out.Events, p.page.Events[p.taken])
		p.taken++
	}
	next := nodeCursors{}
	for i, node := range nodes {
		p := &pages[i]
		// Where it was, unless it answered: a missing node is asked
		// from there again.
		if c := cs.cursors.of(node); c != "" {
			next[node] = c
		}
		switch {
		case p.err != nil:
			jn.s.Options().Logger.Warn("journal: a node did not answer a search of the cluster's journal; its events are missing from the page", "missing_node", node, "err", p.err)
			out.Missing = append(out.Missing, node)
		case p.taken == len(p.page.Events):
			next[node] = p.page.Next
			out.More = out.More || p.page.More
			out.Gap = out.Gap || p.page.Gap
		default:
			out.More = true
			out.Gap = out.Gap || p.page.Gap
			if p.taken > 0 {
				next[node] = p.page.Events[p.taken-1].Cursor
			}
		}
	}
	out.Next = next.String()
	if out.Events == nil {
		out.Events = []protocol.JournalEvent{}
	}
	return out, nil
}

// ask asks node for its page of search.
func (jn *Journal) ask(ctx context.Context, node string, search *journalSearch) (protocol.JournalPage, error) {
	b, err := json.Marshal(search)
	if err != nil {
		return protocol.JournalPage{}, err
	}
	resp, err := jn.s.Survey(ctx, node, surveyOp, b)
	if err != nil {
		return protocol.JournalPage{}, err
	}
	var a journalAnswer
	if err := json.Unmarshal(resp, &a); err != nil {
		return protocol.JournalPage{}, fmt.Errorf("node %s answered a journal search with %.64q: %w", node, resp, err)
	}
	if a.Error != "" {
		return protocol.JournalPage{}, fmt.Errorf("node %s: %s", node, a.Error)
	}
	if a.Page == nil {
		return protocol.JournalPage{}, fmt.Errorf("node %s answered a journal search without a page", node)
	}
	return *a.Page, nil
}

// answerSearch answers another node's search of this node's journal,
// with the reader's rights that node sent: this node has no credential
// to decide them by, and a survey comes only from a node of the cluster
// (it travels on the cluster's NATS, which the nodes alone use;
// docs/CLUSTER.md).
func (jn *Journal) answerSearch(_ context.Context, req []byte) ([]byte, error) {
	var a journalAnswer
	var search journalSearch
	if err := json.Unmarshal(req, &search); err != nil {
		a.Error = fmt.Sprintf("malformed journal search: %v", err)
	} else if page, err := jn.search(&search); err != nil {
		a.Error = err.Error()
	} else {
		a.Page = &page
	}
	return json.Marshal(&a)
}

// search answers one node's part of a cluster's page. A page with
// payloads is cut to what one answer over the cluster carries
// (bus.Options.MaxMessageBytes, of which a delivery is allowed as much),
// at least one event: the rest is the next page's.
func (jn *Journal) search(search *journalSearch) (protocol.JournalPage, error) {
	var page protocol.JournalPage
	j := jn.j
	if j == nil {
		return page, fmt.Errorf("the message journal is off on node %s (--journal=false)", jn.s.Status().Node)
	}
	v, err := url.ParseQuery(search.Query)
	if err != nil {
		return page, fmt.Errorf("journal search query: %w", err)
	}
	req, err := j.parseEventsQuery(v, time.Now())
	if err != nil {
		return page, protocol.Errorf(protocol.ErrInvalidParams, "node %s: %v", jn.s.Status().Node, err)
	}
	if !search.Everything {
		var rules auth.ReadRules
		if search.Reader != nil {
			rules = *search.Reader
		}
		access, err := rules.Access()
		if err != nil {
			return page, err
		}
		req.q.setReader(access)
	}
	req.q.hidePayloads = search.HidePayloads
	events, last, more, gap := j.read(req.after, req.limit, &req.q)
	var size int64
	for i := range events {
		// In JSON an event's field names cost about as much again as
		// its fixed part.
		size += eventBytes(&events[i]) + int64(journalEventBytes)
		if i > 0 && size > jn.maxAnswer {
			events, more = events[:i], true
			last, _ = j.parseCursor(events[i-1].Cursor)
			break
		}
	}
	page = protocol.JournalPage{Events: events, Next: j.cursor(last), More: more, Gap: gap}
	if page.Events == nil {
		page.Events = []protocol.JournalEvent{}
	}
	return page, nil
}
