package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
)

// system is one of the things measured: the bus (through the lean clients
// or the Go SDK), the raw relay, NATS (over TCP or WebSocket) or
// Centrifuge.
type system interface {
	// name is the column heading: "bus", "raw", "nats", "nats-ws",
	// "centrifuge" or "sdk".
	name() string
	// open connects subs subscribers on a topic of its own, each acking
	// every message, and one publisher of payload. done runs once per
	// message when every subscriber has acked it (for the bus: when the
	// sendMessage result is back), from any goroutine; failed says the
	// message or an ack reported an error.
	open(subs int, payload []byte, done func(id uint64, failed bool)) (publisher, error)
	// server is the process serving the system.
	server() *process
}

// serverProcs are the processes whose CPU is sys's server's: every node
// of a cluster, else its one server.
func serverProcs(sys system) []*process {
	if b, ok := sys.(*busSystem); ok && b.nodes != nil {
		return b.nodes
	}
	return []*process{sys.server()}
}

// idler is a system whose idle connections are measured.
type idler interface {
	system
	// idle opens one connection holding one subscription and no traffic.
	idle(i int) (io.Closer, error)
}

// publisher sends messages; send is called from one goroutine at a time.
type publisher interface {
	send(id uint64) error
	close()
}

// dialTimeout bounds every connection setup.
const dialTimeout = 10 * time.Second

// topicSeq makes every open use a topic of its own, so a run never meets
// subscriptions the bus is still tearing down from the last one.
var topicSeq atomic.Uint64

// makePayload returns a JSON object with a string "type", exactly n bytes
// long (n ≥ 32).
func makePayload(n int) []byte {
	head := `{"type":"bench","data":"`
	tail := `"}`
	pad := n - len(head) - len(tail)
	if pad < 0 {
		pad = 0
	}
	return []byte(head + string(bytes.Repeat([]byte{'x'}, pad)) + tail)
}

// --- the bus, spoken to frame by frame ---

// busSystem drives bub serve with a lean JSON-RPC client written against
// coder/websocket directly, so the client costs about what the raw
// relay's client costs and the comparison measures the servers.
//
// The zero values of its other fields make the relay: subscribers that
// process every message. The durable scenarios set them.
type busSystem struct {
	// proc is the bus the publisher dials, and the subscribers unless sub
	// is set.
	proc *process
	// sub, when set, is the bus the subscribers dial: another node of
	// proc's cluster, so that every relay crosses nodes.
	sub *process
	// nodes, when set, are all the nodes of proc's cluster: the system is
	// named "cluster" and its server CPU is theirs together.
	nodes []*process
	// answer is the result every subscriber gives processMessage;
	// default {"processed":true}.
	answer string
	// expect is what a sendMessage result must contain to count as a
	// success; default "success":true.
	expect string
	// topic, when set, is the one topic published to (a subscriber, if
	// any, subscribes it exactly); default a new topic per open.
	topic string
	// label, when set, is the system's name: a bus run with other flags
	// next to the default one.
	label string
}

func (b *busSystem) name() string {
	switch {
	case b.label != "":
		return b.label
	case b.nodes != nil:
		return "cluster"
	}
	return "bus"
}

func (b *busSystem) server() *process { return b.proc }

// dial connects to the publisher's bus as clientID and initializes.
func (b *busSystem) dial(clientID string) (*leanConn, error) {
	return dialBus(b.proc, clientID)
}

// dialSub connects to the subscribers' bus as clientID and initializes.
func (b *busSystem) dialSub(clientID string) (*leanConn, error) {
	return dialBus(cmp.Or(b.sub, b.proc), clientID)
}

// dialBus connects to the bus at p as clientID and initializes.
func dialBus(p *process, clientID string) (*leanConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	ws, err := leanDial(ctx, "ws://"+p.addr+"/")
	if err != nil {
		return nil, fmt.Errorf("dial bus %s as %s: %w", p.addr, clientID, err)
	}
	ws.SetReadLimit(16 << 20)
	if err := busCall(ctx, ws, `{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"`+clientID+`"},"id":"init"}`); err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("initialize %s: %w", clientID, err)
	}
	return ws, nil
}

// busCall writes one request and reads frames until its response, which
// must be a result; only for setup, before any traffic.
func busCall(ctx context.Context, ws *leanConn, req string) error {
	_, err := busRequest(ctx, ws, req)
	return err
}

// busRequest writes one request and returns the next frame, its response
// on a connection that subscribes nothing; an error response is an error.
func busRequest(ctx context.Context, ws *leanConn, req string) ([]byte, error) {
	if err := ws.Write(ctx, websocket.MessageText, []byte(req)); err != nil {
		return nil, err
	}
	_, data, err := ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("response %.200s: %w", data, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("bus answered %s", resp.Error)
	}
	return data, nil
}

func (b *busSystem) subscribe(ws *leanConn, topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	return busCall(ctx, ws, `{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"`+topic+`","policy":"continueAll"},"id":"sub"}`)
}

func (b *busSystem) open(subs int, payload []byte, done func(uint64, bool)) (publisher, error) {
	run := topicSeq.Add(1)
	topic := fmt.Sprintf("bench:t%d:%s", run, fanoutTail)
	pattern := func(i int) string { return fmt.Sprintf("bench:t%d:%s", run, fanoutPattern(i)) }
	if b.topic != "" {
		topic, pattern = b.topic, func(int) string { return b.topic }
	}
	answer, expect := cmp.Or(b.answer, `{"processed":true}`), cmp.Or(b.expect, `"success":true`)
	p := &busPublisher{done: done, expect: []byte(expect)}
	conns, err := parallel(subs, func(i int) (io.Closer, error) {
		ws, err := b.dialSub(fmt.Sprintf("s%d-%d", run, i))
		if err != nil {
			return nil, err
		}
		if err := b.subscribe(ws, pattern(i)); err != nil {
			ws.CloseNow()
			return nil, fmt.Errorf("subscribe %s: %w", pattern(i), err)
		}
		go busAnswer(ws, []byte(answer))
		return closer{ws}, nil
	})
	p.subs = conns
	if err != nil {
		p.close()
		return nil, err
	}
	if p.ws, err = b.dial(fmt.Sprintf("p%d", run)); err != nil {
		p.close()
		return nil, err
	}
	p.prefix = []byte(`{"jsonrpc":"2.0","method":"sendMessage","params":{"topic":"` + topic + `","payload":` + string(payload) + `},"id":`)
	go p.readResults()
	return p, nil
}

// fanoutTail ends the topic of a bus run. Under last-match-wins routing
// only the newest of several identical patterns counts, so a fan-out to n
// subscribers needs n different patterns matching one topic: subscriber i
// replaces the letters of the tail at the set bits of i with '?'.
// Subscriber 0 holds the exact topic, the others globs.
const fanoutTail = "abcdefghijkl"

func fanoutPattern(i int) string {
	b := []byte(fanoutTail)
	for j := range b {
		if i&(1<<j) != 0 {
			b[j] = '?'
		}
	}
	return string(b)
}

// busAnswer answers every processMessage call with result.
func busAnswer(ws *leanConn, result []byte) {
	ctx := context.Background()
	var out []byte
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			return
		}
		id, ok := topLevelID(msg)
		if !ok {
			continue
		}
		out = append(out[:0], `{"jsonrpc":"2.0","id":`...)
		out = append(out, id...)
		out = append(out, `,"result":`...)
		out = append(out, result...)
		out = append(out, '}')
		if ws.answer(websocket.MessageText, out) != nil {
			return
		}
	}
}

// topLevelID finds a message's id, fast when it comes first (as the bus
// writes it), else by decoding.
func topLevelID(msg []byte) ([]byte, bool) {
	if rest, ok := bytes.CutPrefix(msg, []byte(`{"id":`)); ok {
		if end := bytes.IndexAny(rest, ",}"); end > 0 {
			return rest[:end], true
		}
	}
	var env struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(msg, &env) != nil || env.ID == nil {
		return nil, false
	}
	return env.ID, true
}

type busPublisher struct {
	ws     *leanConn
	subs   []io.Closer
	prefix []byte
	buf    []byte
	done   func(uint64, bool)
	expect []byte // in every result that counts as a success
}

func (p *busPublisher) send(id uint64) error {
	p.buf = append(p.buf[:0], p.prefix...)
	p.buf = strconv.AppendUint(p.buf, id, 10)
	p.buf = append(p.buf, '}')
	return p.ws.publish(websocket.MessageText, p.buf)
}

func (p *busPublisher) readResults() {
	for {
		_, msg, err := p.ws.Read(context.Background())
		if err != nil {
			return
		}
		raw, ok := topLevelID(msg)
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(string(raw), 10, 64)
		if err != nil {
			continue
		}
		failed := !bytes.Contains(msg, p.expect) || bytes.Contains(msg, []byte(`"error":`))
		p.done(id, failed)
	}
}

func (p *busPublisher) close() {
	if p.ws != nil {
		p.ws.CloseNow()
	}
	closeAll(p.subs)
}

func (b *busSystem) idle(i int) (io.Closer, error) {
	ws, err := b.dial(fmt.Sprintf("idle-%d-%d", topicSeq.Add(1), i))
	if err != nil {
		return nil, err
	}
	if err := b.subscribe(ws, fmt.Sprintf("idle:%d", i)); err != nil {
		ws.CloseNow()
		return nil, err
	}
	go discard(ws)
	return closer{ws}, nil
}

// --- the raw relay ---

type rawSystem struct{ proc *process }

func (r *rawSystem) name() string     { return "raw" }
func (r *rawSystem) server() *process { return r.proc }

func (r *rawSystem) dial(path string) (*leanConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	ws, err := leanDial(ctx, "ws://"+r.proc.addr+path)
	if err != nil {
		return nil, fmt.Errorf("dial relay %s: %w", path, err)
	}
	ws.SetReadLimit(16 << 20)
	return ws, nil
}

func (r *rawSystem) open(subs int, payload []byte, done func(uint64, bool)) (publisher, error) {
	topic := fmt.Sprintf("t%d", topicSeq.Add(1))
	p := &rawPublisher{done: done, payload: payload}
	conns, err := parallel(subs, func(int) (io.Closer, error) {
		ws, err := r.dial("/sub?topic=" + topic)
		if err != nil {
			return nil, err
		}
		go rawAnswer(ws)
		return closer{ws}, nil
	})
	p.subs = conns
	if err != nil {
		p.close()
		return nil, err
	}
	// The relay counts a subscriber once its handler runs, a moment
	// after the dial returns; give it that moment.
	time.Sleep(50 * time.Millisecond)
	if p.ws, err = r.dial(fmt.Sprintf("/pub?topic=%s&subs=%d", topic, subs)); err != nil {
		p.close()
		return nil, err
	}
	go p.readAcks()
	return p, nil
}

// rawAck is the body of a raw subscriber's ack, after the id.
var rawAck = []byte(`{"processed":true}`)

func rawAnswer(ws *leanConn) {
	ctx := context.Background()
	out := make([]byte, 8, 8+len(rawAck))
	out = append(out, rawAck...)
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if len(msg) < 8 {
			continue
		}
		copy(out, msg[:8])
		if ws.answer(websocket.MessageBinary, out) != nil {
			return
		}
	}
}

type rawPublisher struct {
	ws      *leanConn
	subs    []io.Closer
	payload []byte
	buf     []byte
	done    func(uint64, bool)
}

func (p *rawPublisher) send(id uint64) error {
	p.buf = binary.BigEndian.AppendUint64(p.buf[:0], id)
	p.buf = append(p.buf, p.payload...)
	return p.ws.publish(websocket.MessageBinary, p.buf)
}

func (p *rawPublisher) readAcks() {
	for {
		_, msg, err := p.ws.Read(context.Background())
		if err != nil {
			return
		}
		if len(msg) >= 8 {
			p.done(binary.BigEndian.Uint64(msg), false)
		}
	}
}

func (p *rawPublisher) close() {
	if p.ws != nil {
		p.ws.CloseNow()
	}
	closeAll(p.subs)
}

func (r *rawSystem) idle(i int) (io.Closer, error) {
	ws, err := r.dial(fmt.Sprintf("/sub?topic=idle-%d", i))
	if err != nil {
		return nil, err
	}
	go discard(ws)
	return closer{ws}, nil
}

// --- NATS request/reply ---

// natsSystem is nats-server driven by nats.go, over TCP or, with ws, over
// its WebSocket listener (the same client and protocol in WebSocket
// frames).
type natsSystem struct {
	proc *process
	ws   bool
}

func (n *natsSystem) name() string {
	if n.ws {
		return "nats-ws"
	}
	return "nats"
}

func (n *natsSystem) server() *process { return n.proc }

func (n *natsSystem) connect() (*nats.Conn, error) {
	url := "nats://" + n.proc.addr
	if n.ws {
		url = "ws://" + n.proc.addr
	}
	nc, err := nats.Connect(url, nats.Timeout(dialTimeout), nats.MaxReconnects(0))
	if err != nil {
		return nil, fmt.Errorf("connect to nats-server at %s: %w", url, err)
	}
	return nc, nil
}

// open makes a request/reply pair per subscriber: every subscriber
// responds to the publisher's reply subject, and the publisher counts the
// responses per message (NATS has no aggregation of its own).
func (n *natsSystem) open(subs int, payload []byte, done func(uint64, bool)) (publisher, error) {
	subject := fmt.Sprintf("bench.t%d", topicSeq.Add(1))
	p := &natsPublisher{subject: subject, inbox: nats.NewInbox(), payload: payload}
	acks := newAckCounter(subs)
	conns, err := parallel(subs, func(int) (io.Closer, error) {
		nc, err := n.connect()
		if err != nil {
			return nil, err
		}
		ack := make([]byte, 8, 8+len(rawAck))
		ack = append(ack, rawAck...)
		// nats.go runs one subscription's callbacks one at a time, and
		// Respond copies ack before it returns, so one buffer serves.
		_, err = nc.Subscribe(subject, func(m *nats.Msg) {
			if len(m.Data) < 8 {
				return
			}
			copy(ack, m.Data[:8])
			_ = m.Respond(ack)
		})
		if err == nil {
			err = nc.Flush()
		}
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("subscribe %s: %w", subject, err)
		}
		return natsCloser{nc}, nil
	})
	p.subs = conns
	if err != nil {
		p.close()
		return nil, err
	}
	if p.nc, err = n.connect(); err != nil {
		p.close()
		return nil, err
	}
	_, err = p.nc.Subscribe(p.inbox, func(m *nats.Msg) {
		if len(m.Data) < 8 {
			return
		}
		if id := binary.BigEndian.Uint64(m.Data); acks.complete(id) {
			done(id, false)
		}
	})
	if err == nil {
		err = p.nc.Flush()
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("subscribe %s: %w", p.inbox, err)
	}
	return p, nil
}

type natsPublisher struct {
	nc      *nats.Conn
	subs    []io.Closer
	subject string
	inbox   string
	payload []byte
	buf     []byte
}

// ackCounter counts a fan-out's acks per message, for the systems that do
// not gather them into one answer as the bus does (NATS, Centrifuge).
type ackCounter struct {
	want    int
	mu      sync.Mutex
	pending map[uint64]int // acks so far, when want > 1
}

func newAckCounter(want int) *ackCounter {
	return &ackCounter{want: want, pending: make(map[uint64]int)}
}

// complete counts one ack of message id and says whether it was the last
// one the message waited for.
func (a *ackCounter) complete(id uint64) bool {
	if a.want <= 1 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.pending[id] + 1
	if n < a.want {
		a.pending[id] = n
		return false
	}
	delete(a.pending, id)
	return true
}

func (p *natsPublisher) send(id uint64) error {
	// nats.go copies the data into its write buffer before returning.
	p.buf = binary.BigEndian.AppendUint64(p.buf[:0], id)
	p.buf = append(p.buf, p.payload...)
	return p.nc.PublishRequest(p.subject, p.inbox, p.buf)
}

func (p *natsPublisher) close() {
	if p.nc != nil {
		p.nc.Close()
	}
	closeAll(p.subs)
}

func (n *natsSystem) idle(i int) (io.Closer, error) {
	nc, err := n.connect()
	if err != nil {
		return nil, err
	}
	if _, err := nc.Subscribe(fmt.Sprintf("idle.%d", i), func(*nats.Msg) {}); err != nil {
		nc.Close()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	return natsCloser{nc}, nil
}

// --- helpers ---

// closer closes a lean client's connection, or a Centrifuge client's
// (a plain coder/websocket one).
type closer struct{ ws interface{ CloseNow() error } }

func (c closer) Close() error { return c.ws.CloseNow() }

type natsCloser struct{ nc *nats.Conn }

func (c natsCloser) Close() error { c.nc.Close(); return nil }

// discard reads and drops frames until the connection ends, so control
// frames (pings, close) are handled.
func discard(ws *leanConn) {
	for {
		if _, _, err := ws.Read(context.Background()); err != nil {
			return
		}
	}
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

// parallel runs open n times on a few goroutines and returns what it
// opened; on the first error it returns what it opened so far, for the
// caller to close.
func parallel(n int, open func(i int) (io.Closer, error)) ([]io.Closer, error) {
	out := make([]io.Closer, n)
	var (
		next  atomic.Int64
		errMu sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range min(n, 32) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				errMu.Lock()
				failed := first != nil
				errMu.Unlock()
				if failed {
					return
				}
				c, err := open(i)
				if err != nil {
					errMu.Lock()
					first = errors.Join(first, err)
					errMu.Unlock()
					return
				}
				out[i] = c
			}
		})
	}
	wg.Wait()
	return out, first
}
