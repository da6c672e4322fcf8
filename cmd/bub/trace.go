package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/internal/redact"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

func init() {
	register("trace", "print what happened to a message, and to the replies that name it, as a timeline", runTrace)
	register("tail", "follow the bus's message journal as it happens", runTail)
}

// journalFlags are the flags trace and tail share: where the bus is and
// the credential, as bub backup takes them (the journal is read over
// HTTP from the same address).
type journalFlags struct {
	busURL string
	cred   credentialFlags
	json   bool
}

func (f *journalFlags) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.busURL, "bus-url", peer.DefaultBusURL, busURLUsage+"; the journal is read over HTTP(S) from the same address")
	bindEnv(fs, "bus-url")
	f.cred.addFlags(fs)
	fs.BoolVar(&f.json, "json", false, "print each event as a line of JSON (the API's JournalEvent)")
}

// endpoints are the journal's URL at path on every node of --bus-url, and
// the credential.
func (f *journalFlags) endpoints(path string) ([]string, string, error) {
	if err := checkBusURL(f.busURL); err != nil {
		return nil, "", err
	}
	var out []string
	for _, u := range busURLs(f.busURL) {
		e, err := busHTTPURL(u, path)
		if err != nil {
			return nil, "", err
		}
		out = append(out, e)
	}
	token, err := f.cred.resolve()
	return out, token, err
}

// busHTTPURL is path on the bus's HTTP side, at the address of its
// WebSocket URL: ws:// becomes http://, wss:// https://; relative to the
// bus's path, so that a bus behind a proxy at /bub/ is asked under /bub/.
func busHTTPURL(busURL, path string) (string, error) {
	u, err := redact.Parse(busURL)
	if err != nil {
		return "", fmt.Errorf("bus URL %q: %w", redact.URL(busURL), err)
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	}
	return u.ResolveReference(&url.URL{Path: strings.TrimPrefix(path, "/")}).String(), nil
}

// journalGet GETs endpoint with the credential and returns the answer,
// or an error saying what the bus refused and why.
func journalGet(ctx context.Context, endpoint, token string, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s: %w", redact.URL(endpoint), err)
	}
	if res.StatusCode == http.StatusOK {
		return res, nil
	}
	defer res.Body.Close()
	var e struct {
		Error *protocol.Error `json:"error"`
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		msg = e.Error.Message
	}
	if res.StatusCode == http.StatusUnauthorized {
		msg += "; check --token, --token-file or BUB_TOKEN"
	}
	err = fmt.Errorf("%s: %s: %s", redact.URL(endpoint), res.Status, msg)
	if res.StatusCode < 500 {
		err = &refusedError{err}
	}
	return nil, err
}

// refusedError is the bus's refusal of a request (4xx): asking again
// would get the same answer.
type refusedError struct{ error }

func (e *refusedError) Unwrap() error { return e.error }

const traceSynopsis = `trace MESSAGE_ID [flags]

Prints what happened to a message as a timeline: who published it and from
where, the subscribers it was routed to, each delivery attempt and its
answer, retries, holds, dead letters, replays and purges; and the same for
every message published with meta.correlation_id set to MESSAGE_ID (an
agent's reply to it). It reads the bus's message journal (GET /v1/events),
which holds the last hour by default (--journal-max-age) and only what the
credential may subscribe to (all for an admin). In a cluster each node
journals what it did, and any node answers for the whole cluster, naming
the nodes that did not answer: give every node in --bus-url, and the next
is asked when one is down or names a node missing.`

func runTrace(ctx context.Context, std stdio, args []string) int {
	var (
		f       journalFlags
		timeout time.Duration
	)
	fs := newFlagSet(std, "trace", traceSynopsis)
	f.addFlags(fs)
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the bus")
	ids, code, ok := parseInterleaved(fs, std, args)
	if !ok {
		return code
	}
	if len(ids) != 1 {
		return usagef(std, "trace", "name one message: bub trace MESSAGE_ID")
	}
	endpoints, token, err := f.endpoints(journal.PathEvents)
	if err != nil {
		return usagef(std, "trace", "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var events []protocol.JournalEvent
	var failed []error
	// A node of a cluster answers for the whole cluster, less the nodes
	// it names missing: the next endpoint is asked only while some are,
	// and an event two answers share (its node and cursor) is kept once.
	seen := make(map[string]bool)
	var missing []string
	answered := false
	for _, e := range endpoints {
		got, gone, err := traceFrom(ctx, e, token, ids[0])
		if err != nil {
			failed = append(failed, err)
			continue
		}
		for i := range got {
			key := got[i].Node + " " + got[i].Cursor
			if !seen[key] {
				seen[key] = true
				events = append(events, got[i])
			}
		}
		if !answered {
			missing = gone
		} else {
			missing = slices.DeleteFunc(missing, func(n string) bool { return !slices.Contains(gone, n) })
		}
		answered = true
		if len(missing) == 0 {
			failed = nil
			break
		}
	}
	if !answered {
		return errorf(std, "%v", errors.Join(failed...))
	}
	for _, err := range failed {
		fmt.Fprintf(std.err, "bub trace: %v (its part of the story is missing)\n", err)
	}
	for _, n := range missing {
		fmt.Fprintf(std.err, "bub trace: node %s did not answer (its part of the story is missing)\n", n)
	}
	if len(events) == 0 {
		return errorf(std, "no journal events for message %s: not published through this bus, older than the journal keeps (--journal-max-age), or on topics the credential may not subscribe to", ids[0])
	}
	slices.SortStableFunc(events, func(a, b protocol.JournalEvent) int { return a.Time.Compare(b.Time) })
	start := events[0].Time
	for i := range events {
		if f.json {
			b, _ := json.Marshal(&events[i])
			fmt.Fprintf(std.out, "%s\n", b)
			continue
		}
		fmt.Fprintf(std.out, "%s %9s  %s\n", events[i].Time.UTC().Format("15:04:05.000"), "+"+formatOffset(events[i].Time.Sub(start)), describeEvent(&events[i], ids[0]))
	}
	return 0
}

// traceFrom reads every page of id's story from one node (of a cluster:
// the cluster's), and the nodes that did not answer it.
func traceFrom(ctx context.Context, endpoint, token, id string) ([]protocol.JournalEvent, []string, error) {
	var events []protocol.JournalEvent
	var missing []string
	q := url.Values{"correlationId": {id}, "limit": {"1000"}}
	for {
		res, err := journalGet(ctx, endpoint+"?"+q.Encode(), token, nil)
		if err != nil {
			return nil, nil, err
		}
		var page protocol.JournalPage
		err = json.NewDecoder(res.Body).Decode(&page)
		res.Body.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: read the answer: %w", redact.URL(endpoint), err)
		}
		events = append(events, page.Events...)
		for _, n := range page.Missing {
			if !slices.Contains(missing, n) {
				missing = append(missing, n)
			}
		}
		if !page.More {
			return events, missing, nil
		}
		q.Set("after", page.Next)
	}
}

// formatOffset is d since the first event, short: 0.012s, 3.5s, 2m10s.
func formatOffset(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.3fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// describeEvent says what ev records, in a line; the message id is
// named when it is not the traced one (a reply).
func describeEvent(ev *protocol.JournalEvent, traced string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-15s", ev.Kind)
	if ev.MessageID != traced {
		fmt.Fprintf(&b, " [%s]", ev.MessageID)
	}
	switch ev.Kind {
	case protocol.JournalAccepted:
		fmt.Fprintf(&b, " %s from %s", ev.Topic, ev.From)
		if ev.Identity != "" && ev.Identity != ev.From {
			fmt.Fprintf(&b, " (identity %s)", ev.Identity)
		}
		fmt.Fprintf(&b, " over %s from %s", ev.API, ev.Remote)
		if ev.CorrelationID != "" {
			fmt.Fprintf(&b, ", answering %s", ev.CorrelationID)
		}
	case protocol.JournalRouted, protocol.JournalWoken:
		if len(ev.Chain) == 0 {
			fmt.Fprintf(&b, " to nobody (%s)", ev.Reason)
		} else {
			fmt.Fprintf(&b, " to %s", strings.Join(ev.Chain, ", "))
		}
	case protocol.JournalDelivery:
		fmt.Fprintf(&b, " to %s (%s), attempt %d: %s", ev.ClientID, ev.Subscription, ev.Attempt, ev.Outcome)
		if ev.Error != "" {
			fmt.Fprintf(&b, ": %s", ev.Error)
		}
	case protocol.JournalRetryScheduled:
		fmt.Fprintf(&b, " for %s, attempt %d at %s", ev.ClientID, ev.Attempt, ev.NextAt.UTC().Format(time.RFC3339))
	case protocol.JournalHeld:
		fmt.Fprintf(&b, " for a subscriber to %s until %s", ev.Topic, ev.NextAt.UTC().Format(time.RFC3339))
	case protocol.JournalDeadLettered:
		fmt.Fprintf(&b, " as %s (%s)", ev.DeadLetterID, ev.Reason)
		if ev.ClientID != "" {
			fmt.Fprintf(&b, " for %s", ev.ClientID)
		}
	case protocol.JournalReplayed:
		fmt.Fprintf(&b, " %s to its %s", ev.DeadLetterID, ev.Reason)
	case protocol.JournalPurged:
		fmt.Fprintf(&b, " %s", ev.DeadLetterID)
	}
	if ev.Node != "" {
		fmt.Fprintf(&b, " @%s", ev.Node)
	}
	return b.String()
}

const tailSynopsis = `tail [--topic PATTERN] [--since T] [flags]

Follows the bus's message journal (GET /v1/events/stream), one line per
event, until interrupted: every message accepted, routed, delivered,
retried, held, dead-lettered, replayed or purged on topics matching
PATTERN that the credential may subscribe to (all for an admin). A lost
connection is resumed where it stopped (Last-Event-ID), so nothing the
journal still holds is missed. --since T (RFC 3339 or a duration ago)
starts with the events since then. With several nodes in --bus-url, it
follows the first that answers, each node's journal being its own.`

func runTail(ctx context.Context, std stdio, args []string) int {
	var (
		f     journalFlags
		topic string
		since string
	)
	fs := newFlagSet(std, "tail", tailSynopsis)
	f.addFlags(fs)
	fs.StringVar(&topic, "topic", "", "only events of messages whose topic this pattern matches")
	fs.StringVar(&since, "since", "", "start with the events since this time (RFC 3339, or a duration ago: 10m)")
	rest, code, ok := parseInterleaved(fs, std, args)
	if !ok {
		return code
	}
	if len(rest) > 0 {
		return usagef(std, "tail", "unexpected argument %q; give the topic with --topic", rest[0])
	}
	if topic != "" {
		if _, err := protocol.ParsePattern(topic); err != nil {
			return usagef(std, "tail", "--topic: %v", err)
		}
	}
	endpoints, token, err := f.endpoints(journal.PathEventsStream)
	if err != nil {
		return usagef(std, "tail", "%v", err)
	}
	q := url.Values{}
	if topic != "" {
		q.Set("topic", topic)
	}
	if since != "" {
		q.Set("since", since)
	}
	t := &tailer{std: std, json: f.json, token: token}
	return t.follow(ctx, endpoints, q)
}

// tailer follows the stream and prints it.
type tailer struct {
	std    stdio
	json   bool
	token  string
	lastID string
}

// tailRetry is the wait before reconnecting; a stream that was refused
// outright (a bad flag, a credential) is not retried.
const tailRetry = 2 * time.Second

// follow reads the stream from the first endpoint that answers, and
// reconnects after a loss with the last id it printed, until ctx ends.
func (t *tailer) follow(ctx context.Context, endpoints []string, q url.Values) int {
	connected := false
	query := ""
	if len(q) > 0 {
		query = "?" + q.Encode()
	}
	for i := 0; ; i = (i + 1) % len(endpoints) {
		endpoint := endpoints[i] + query
		header := http.Header{}
		if t.lastID != "" {
			header.Set("Last-Event-ID", t.lastID)
		}
		res, err := journalGet(ctx, endpoint, t.token, header)
		switch {
		case ctx.Err() != nil:
			return 0
		case errors.As(err, new(*refusedError)) && !connected:
			// Refused with a 4xx before anything was read: saying it
			// again would not change the answer.
			return errorf(t.std, "%v", err)
		case err != nil:
			fmt.Fprintf(t.std.err, "bub tail: %v; retrying in %s\n", err, tailRetry)
		default:
			connected = true
			err = t.read(res.Body)
			res.Body.Close()
			if ctx.Err() != nil {
				return 0
			}
			fmt.Fprintf(t.std.err, "bub tail: stream ended (%v); resuming in %s\n", err, tailRetry)
			// Resume on the same node: its cursors are its own.
			i--
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(tailRetry):
		}
	}
}

// read prints the events of one stream until it ends.
func (t *tailer) read(body io.Reader) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var id string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			var ev protocol.JournalEvent
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				return fmt.Errorf("an event that is not JSON: %w", err)
			}
			if t.json {
				fmt.Fprintln(t.std.out, data)
			} else {
				fmt.Fprintf(t.std.out, "%s %-20s %s\n", ev.Time.UTC().Format("15:04:05.000"), ev.MessageID, describeEvent(&ev, ev.MessageID))
			}
			t.lastID = id
		case strings.HasPrefix(line, ": ") && line != ": keepalive":
			// The bus's notes, such as events dropped while away.
			fmt.Fprintf(t.std.err, "bub tail: %s\n", strings.TrimPrefix(line, ": "))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}
