package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// sdkSystem drives bub serve through the Go SDK (package peer) on both
// ends: subscribers are peer handlers, the publisher calls
// Conn.SendMessage. Next to busSystem, whose lean clients cost about what
// the raw relay's do, it shows what the SDK adds to a relay, on the
// client's CPU and in latency.
type sdkSystem struct{ proc *process }

func (s *sdkSystem) name() string     { return "sdk" }
func (s *sdkSystem) server() *process { return s.proc }

// sdkWorkers is how many SendMessage calls one publisher runs at once:
// the most messages any scenario keeps in flight, since SendMessage
// blocks until the result is back.
const sdkWorkers = 64

// sdkLogger keeps the SDK's info-level connection logs out of the report.
var sdkLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func (s *sdkSystem) dial(clientID string) (*peer.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	c, err := peer.Dial(ctx, "ws://"+s.proc.addr+"/", &peer.Options{
		ClientID:    clientID,
		NoReconnect: true,
		// Above sdkWorkers, so that no delivery is refused as busy.
		MaxConcurrentHandlers: 4 * sdkWorkers,
		MaxMessageBytes:       16 << 20,
		Logger:                sdkLogger,
	})
	if err != nil {
		return nil, fmt.Errorf("dial bus with the SDK as %s: %w", clientID, err)
	}
	return c, nil
}

func (s *sdkSystem) open(subs int, payload []byte, done func(uint64, bool)) (publisher, error) {
	run := topicSeq.Add(1)
	topic := fmt.Sprintf("bench:t%d:%s", run, fanoutTail)
	processed := func(context.Context, *peer.Delivery) (peer.Result, error) {
		return peer.Result{Processed: true}, nil
	}
	conns, err := parallel(subs, func(i int) (io.Closer, error) {
		c, err := s.dial(fmt.Sprintf("sdk-s%d-%d", run, i))
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		pattern := fmt.Sprintf("bench:t%d:%s", run, fanoutPattern(i))
		if err := c.Subscribe(ctx, pattern, processed, &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll}); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
	p := &sdkPublisher{subs: conns, ids: make(chan uint64, 4*sdkWorkers), stop: make(chan struct{})}
	if err != nil {
		p.close()
		return nil, err
	}
	if p.conn, err = s.dial(fmt.Sprintf("sdk-p%d", run)); err != nil {
		p.close()
		return nil, err
	}
	for range sdkWorkers {
		go p.work(topic, json.RawMessage(payload), done)
	}
	return p, nil
}

// sdkPublisher hands each message to one of sdkWorkers goroutines, each
// of which calls SendMessage and waits for its result.
type sdkPublisher struct {
	conn *peer.Conn
	subs []io.Closer
	ids  chan uint64
	stop chan struct{}
}

func (p *sdkPublisher) send(id uint64) error {
	select {
	case p.ids <- id:
		return nil
	default:
		return fmt.Errorf("sdk publisher: %d messages queued", cap(p.ids))
	}
}

func (p *sdkPublisher) work(topic string, payload json.RawMessage, done func(uint64, bool)) {
	for {
		select {
		case <-p.stop:
			return
		case id := <-p.ids:
			res, err := sdkSend(p.conn, topic, payload)
			done(id, err != nil || !res.Success)
		}
	}
}

// sdkSend is the harness's one call of the SDK's publish, so that a
// change of its signature is one edit.
func sdkSend(c *peer.Conn, topic string, payload json.RawMessage) (*protocol.SendMessageResult, error) {
	return c.SendMessage(context.Background(), topic, payload, nil)
}

func (p *sdkPublisher) close() {
	close(p.stop)
	if p.conn != nil {
		p.conn.Close()
	}
	closeAll(p.subs)
}
