package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/internal/outbound"
)

// The raw relay is the physical limit of the bus's topology: the same
// WebSocket library, the same transport (internal/outbound's coalesced
// writes, as the bus accepts its peers) and the same four frames per relay
// (publish, delivery, ack, result), but no JSON-RPC, no routing and no
// store. A frame is an 8-byte big-endian message id followed by the body,
// forwarded untouched.
//
// Subscribers connect to /sub?topic=T, the publisher to
// /pub?topic=T&subs=N once N subscribers are in. Every publish goes to every
// subscriber of T; when all N have acked, the publisher gets one frame with
// the id, as the bus answers sendMessage once per message.

// relayTopic is one topic's subscribers and publisher.
type relayTopic struct {
	mu      sync.Mutex
	subs    []*outbound.Conn
	pub     *outbound.Conn
	pending map[uint64]int // acks still missing per message, when subs > 1
}

type relayServer struct {
	mu     sync.Mutex
	topics map[string]*relayTopic
}

func (s *relayServer) topic(name string) *relayTopic {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[name]
	if t == nil {
		t = &relayTopic{pending: make(map[uint64]int)}
		s.topics[name] = t
	}
	return t
}

func serveRelay(listen string) error {
	s := &relayServer{topics: make(map[string]*relayTopic)}
	mux := http.NewServeMux()
	mux.HandleFunc("/sub", s.serveSub)
	mux.HandleFunc("/pub", s.servePub)
	return serveAndAnnounce(listen, mux)
}

// serveAndAnnounce listens, prints "listening ADDR" for the harness and
// serves until killed.
func serveAndAnnounce(listen string, h http.Handler) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", l.Addr())
	return http.Serve(l, h)
}

// relayWriteTimeout is the bus's default Options.WriteTimeout.
const relayWriteTimeout = 10 * time.Second

func (s *relayServer) serveSub(w http.ResponseWriter, r *http.Request) {
	ws, out, err := outbound.Accept(w, r, nil, relayWriteTimeout)
	if err != nil {
		return
	}
	ws.SetReadLimit(8 << 20)
	t := s.topic(r.URL.Query().Get("topic"))
	t.mu.Lock()
	t.subs = append(t.subs, out)
	t.mu.Unlock()
	ctx := context.Background()
	for {
		_, ack, err := ws.Read(ctx)
		if err != nil || len(ack) < 8 {
			ws.CloseNow()
			return
		}
		t.mu.Lock()
		pub, n := t.pub, len(t.subs)
		if n > 1 {
			id := binary.BigEndian.Uint64(ack)
			left := t.pending[id] - 1
			if left > 0 {
				t.pending[id] = left
				t.mu.Unlock()
				continue
			}
			delete(t.pending, id)
			ack = ack[:8]
		}
		t.mu.Unlock()
		if pub != nil {
			_ = writeInBatch(pub, out, ack)
		}
	}
}

// writeInBatch writes msg to to, read from from: while more of the batch
// from was read in waits, the write is left to to's writer, so that the
// batch's messages leave in one write call (outbound.Conn.WriteMessageMore).
func writeInBatch(to, from *outbound.Conn, msg []byte) error {
	if from.Buffered() > 0 {
		return to.WriteMessageMore(websocket.MessageBinary, msg)
	}
	return to.WriteMessage(websocket.MessageBinary, msg)
}

func (s *relayServer) servePub(w http.ResponseWriter, r *http.Request) {
	ws, out, err := outbound.Accept(w, r, nil, relayWriteTimeout)
	if err != nil {
		return
	}
	ws.SetReadLimit(8 << 20)
	t := s.topic(r.URL.Query().Get("topic"))
	want, _ := strconv.Atoi(r.URL.Query().Get("subs"))
	t.mu.Lock()
	t.pub = out
	subs := t.subs
	t.mu.Unlock()
	if len(subs) != want {
		ws.Close(websocket.StatusPolicyViolation, fmt.Sprintf("topic has %d subscribers, not %d", len(subs), want))
		return
	}
	ctx := context.Background()
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil || len(msg) < 8 {
			ws.CloseNow()
			return
		}
		if len(subs) == 1 {
			_ = writeInBatch(subs[0], out, msg)
			continue
		}
		t.mu.Lock()
		t.pending[binary.BigEndian.Uint64(msg)] = len(subs)
		t.mu.Unlock()
		// A fan-out is queued on every subscriber's connection and each
		// is flushed once, before this read loop reads again, as the
		// bus's walk writes one (outbound.Batch).
		for _, sub := range subs {
			out.Batch().Hold(sub)
			_ = sub.WriteMessage(websocket.MessageBinary, msg)
		}
	}
}
