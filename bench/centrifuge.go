package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/centrifugal/centrifuge"
	"github.com/coder/websocket"
)

// Centrifuge is the engine of Centrifugo, the server a WebSocket user
// would pick instead of the bus: github.com/centrifugal/centrifuge with its
// memory broker, serving its client protocol (JSON, v2) on WebSocket. The
// harness runs it as a process of its own (-role centrifuge) that lets any
// connection in, subscribe and publish, as a Centrifugo with anonymous
// access and client publishing allowed would.
//
// The relay is its own publish → subscriber → reply: subscribers subscribe
// channel T, the publisher subscribes channel R and publishes every message
// to T; each subscriber publishes an ack carrying the message's id to R.
// Every client publish gets a reply from the server, so a relay is six
// frames where the others take four: the two more are the small publish
// replies.

// centrifugePath is where the server serves its WebSocket endpoint, the
// path Centrifugo uses.
const centrifugePath = "/connection/websocket"

// The limits of Centrifuge's defaults that would refuse the harness's
// own load: a client's message is at most 64 KiB (the 64 KiB relay's
// publish is more), its outgoing queue at most 1 MiB (64 deliveries of
// 64 KiB in flight are 4 MiB) and a write may take 1 s (the bus's, the
// raw relay's, allow 10 s). Everything else stays at its default.
const (
	centrifugeMessageLimit = 16 << 20
	centrifugeQueueLimit   = 64 << 20
)

// centrifugeHandler starts a Centrifuge node that allows every client
// anything and returns its WebSocket handler.
func centrifugeHandler() (http.Handler, error) {
	node, err := centrifuge.New(centrifuge.Config{ClientQueueMaxSize: centrifugeQueueLimit})
	if err != nil {
		return nil, fmt.Errorf("new centrifuge node: %w", err)
	}
	node.OnConnecting(func(context.Context, centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		// An anonymous user: no token asked for, as the others ask none.
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{}}, nil
	})
	node.OnConnect(func(c *centrifuge.Client) {
		c.OnSubscribe(func(_ centrifuge.SubscribeEvent, cb centrifuge.SubscribeCallback) {
			cb(centrifuge.SubscribeReply{}, nil)
		})
		c.OnPublish(func(_ centrifuge.PublishEvent, cb centrifuge.PublishCallback) {
			cb(centrifuge.PublishReply{}, nil)
		})
	})
	if err := node.Run(); err != nil {
		return nil, fmt.Errorf("run centrifuge node: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(centrifugePath, centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{
		MessageSizeLimit: centrifugeMessageLimit,
		WriteTimeout:     relayWriteTimeout,
	}))
	return mux, nil
}

// serveCentrifuge serves Centrifuge on listen until killed.
func serveCentrifuge(listen string) error {
	h, err := centrifugeHandler()
	if err != nil {
		return err
	}
	return serveAndAnnounce(listen, h)
}

// centrifugeSystem drives a Centrifuge server with the same lean clients
// as the bus's and the raw relay's (leanConn: coder/websocket reads,
// outbound's batching writer writes), speaking the JSON client protocol:
// one command per frame; a frame from the server may hold several
// messages, one per line.
type centrifugeSystem struct{ proc *process }

func (c *centrifugeSystem) name() string     { return "centrifuge" }
func (c *centrifugeSystem) server() *process { return c.proc }

// dial connects, sends the connect command and subscribes channel.
func (c *centrifugeSystem) dial(channel string) (*leanConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	url := "ws://" + c.proc.addr + centrifugePath
	ws, err := leanDial(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("dial centrifuge %s: %w", url, err)
	}
	ws.SetReadLimit(centrifugeMessageLimit)
	if err := centrifugeCall(ctx, ws, 1, `{"id":1,"connect":{}}`); err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("connect to centrifuge %s: %w", url, err)
	}
	if err := centrifugeCall(ctx, ws, 2, `{"id":2,"subscribe":{"channel":"`+channel+`"}}`); err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("subscribe centrifuge channel %s: %w", channel, err)
	}
	return ws, nil
}

// centrifugeCall writes one command and reads until its reply; only for
// setup, before any traffic.
func centrifugeCall(ctx context.Context, ws *leanConn, id uint64, cmd string) error {
	if err := ws.Write(ctx, websocket.MessageText, []byte(cmd)); err != nil {
		return err
	}
	for {
		_, frame, err := ws.Read(ctx)
		if err != nil {
			return err
		}
		for msg := range bytes.SplitSeq(frame, []byte("\n")) {
			m := parseCentrifuge(msg)
			if m.kind == centrifugeReply && m.id == id {
				if m.failed {
					return fmt.Errorf("centrifuge answered %.200s", msg)
				}
				return nil
			}
		}
	}
}

func (c *centrifugeSystem) open(subs int, payload []byte, done func(uint64, bool)) (publisher, error) {
	run := topicSeq.Add(1)
	topic, replies := fmt.Sprintf("t%d", run), fmt.Sprintf("r%d", run)
	p := &centrifugePublisher{acks: newAckCounter(subs), done: done}
	conns, err := parallel(subs, func(int) (io.Closer, error) {
		ws, err := c.dial(topic)
		if err != nil {
			return nil, err
		}
		go centrifugeAnswer(ws, replies)
		return closer{ws}, nil
	})
	p.conns = conns
	if err != nil {
		p.close()
		return nil, err
	}
	if p.ws, err = c.dial(replies); err != nil {
		p.close()
		return nil, err
	}
	p.conns = append(p.conns, closer{p.ws})
	p.tail = []byte(`,"publish":{"channel":"` + topic + `","data":{"id":`)
	p.payload = []byte(`,"payload":` + string(payload) + `}}}`)
	go p.readAcks()
	return p, nil
}

// centrifugeAnswer acks every publication by publishing its id to the
// replies channel, and answers the server's pings.
func centrifugeAnswer(ws *leanConn, replies string) {
	ctx := context.Background()
	head := []byte(`,"publish":{"channel":"` + replies + `","data":{"id":`)
	var out []byte
	var cmd uint64 = 2 // connect and subscribe took 1 and 2
	for {
		_, frame, err := ws.Read(ctx)
		if err != nil {
			return
		}
		for msg := range bytes.SplitSeq(frame, []byte("\n")) {
			switch m := parseCentrifuge(msg); m.kind {
			case centrifugePing:
				err = ws.answer(websocket.MessageText, centrifugePong)
			case centrifugePush:
				cmd++
				out = append(out[:0], `{"id":`...)
				out = strconv.AppendUint(out, cmd, 10)
				out = append(out, head...)
				out = strconv.AppendUint(out, m.id, 10)
				out = append(out, `,"processed":true}}}`...)
				err = ws.answer(websocket.MessageText, out)
			}
			if err != nil {
				return
			}
		}
	}
}

// centrifugePong is the client's answer to the server's ping, an empty
// message both ways.
var centrifugePong = []byte("{}")

// centrifugePublisher publishes each message with the message's id as the
// command's id, so that a failed publish's error reply names the message.
type centrifugePublisher struct {
	ws      *leanConn
	conns   []io.Closer // the subscribers' and, once dialed, ws
	tail    []byte      // after the command id, up to the message id in the data
	payload []byte      // after the message id, to the end
	buf     []byte
	acks    *ackCounter
	done    func(uint64, bool)
}

func (p *centrifugePublisher) send(id uint64) error {
	p.buf = append(p.buf[:0], `{"id":`...)
	p.buf = strconv.AppendUint(p.buf, id, 10)
	p.buf = append(p.buf, p.tail...)
	p.buf = strconv.AppendUint(p.buf, id, 10)
	p.buf = append(p.buf, p.payload...)
	return p.ws.publish(websocket.MessageText, p.buf)
}

func (p *centrifugePublisher) readAcks() {
	ctx := context.Background()
	for {
		_, frame, err := p.ws.Read(ctx)
		if err != nil {
			return
		}
		for msg := range bytes.SplitSeq(frame, []byte("\n")) {
			switch m := parseCentrifuge(msg); m.kind {
			case centrifugePing:
				err = p.ws.answer(websocket.MessageText, centrifugePong)
			case centrifugeReply:
				// A publish's reply: only a refusal says anything, as no
				// ack will follow it.
				if m.failed {
					p.done(m.id, true)
				}
			case centrifugePush:
				if p.acks.complete(m.id) {
					p.done(m.id, false)
				}
			}
			if err != nil {
				return
			}
		}
	}
}

func (p *centrifugePublisher) close() { closeAll(p.conns) }

func (c *centrifugeSystem) idle(i int) (io.Closer, error) {
	ws, err := c.dial(fmt.Sprintf("idle-%d-%d", topicSeq.Add(1), i))
	if err != nil {
		return nil, err
	}
	// Pings must be answered, or the server closes the connection.
	go centrifugeAnswer(ws, "")
	return closer{ws}, nil
}

// centrifugeKind is what a message from a Centrifuge server is, to the
// harness.
type centrifugeKind int

const (
	centrifugeOther centrifugeKind = iota
	centrifugePing                 // {}: to be answered with {}
	centrifugeReply                // the reply to command id
	centrifugePush                 // a publication whose data carries message id
)

// centrifugeMsg is one message of a frame from a Centrifuge server.
type centrifugeMsg struct {
	kind   centrifugeKind
	id     uint64
	failed bool // a reply that is an error
}

// parseCentrifuge reads one message: fast when it is laid out as
// Centrifuge writes it, else by decoding.
func parseCentrifuge(msg []byte) centrifugeMsg {
	msg = bytes.TrimSpace(msg)
	if string(msg) == "{}" {
		return centrifugeMsg{kind: centrifugePing}
	}
	if rest, ok := bytes.CutPrefix(msg, []byte(`{"id":`)); ok {
		if id, rest, ok := leadingUint(rest); ok {
			return centrifugeMsg{kind: centrifugeReply, id: id, failed: bytes.HasPrefix(rest, []byte(`,"error":`))}
		}
	}
	if bytes.HasPrefix(msg, []byte(`{"push":`)) {
		if _, data, ok := bytes.Cut(msg, []byte(`"data":{"id":`)); ok {
			if id, _, ok := leadingUint(data); ok {
				return centrifugeMsg{kind: centrifugePush, id: id}
			}
		}
	}
	var env struct {
		ID    uint64          `json:"id"`
		Error json.RawMessage `json:"error"`
		Push  *struct {
			Pub *struct {
				Data struct {
					ID uint64 `json:"id"`
				} `json:"data"`
			} `json:"pub"`
		} `json:"push"`
	}
	switch {
	case json.Unmarshal(msg, &env) != nil:
		return centrifugeMsg{}
	case env.Push != nil && env.Push.Pub != nil && env.Push.Pub.Data.ID != 0:
		return centrifugeMsg{kind: centrifugePush, id: env.Push.Pub.Data.ID}
	case env.Push == nil && env.ID != 0:
		return centrifugeMsg{kind: centrifugeReply, id: env.ID, failed: env.Error != nil}
	}
	return centrifugeMsg{}
}

// leadingUint parses the decimal digits b starts with and returns the
// rest after them.
func leadingUint(b []byte) (uint64, []byte, bool) {
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	v, err := strconv.ParseUint(string(b[:n]), 10, 64)
	return v, b[n:], err == nil
}
