package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestPublisherOrder pipelines many messages from one connection to a
// chain of subscribers under every policy, one of which stops the walk
// for every other message, and checks that each subscriber reads the
// messages it gets in the order they were sent: per-publisher order
// (docs/PROTOCOL.md). Subscribers record the order in which frames
// arrive on their connection and answer from another goroutine, in
// batches, so answers come back out of step with deliveries.
func TestPublisherOrder(t *testing.T) {
	const messages = 400
	srv := bustest.Start(t, &bus.Options{MaxInFlight: messages})
	checkPublisherOrder(t, messages, srv.URL, func(int) string { return srv.URL })
}

// checkPublisherOrder is TestPublisherOrder's check with the publisher
// connected to pubURL and the i-th subscriber to subURL(i), so that a
// cluster's nodes can share them out.
func checkPublisherOrder(t *testing.T, messages int, pubURL string, subURL func(i int) string) {
	type sub struct {
		name, pattern string
		policy        protocol.Policy
		want          int // messages it receives
	}
	// Newest first, as the chain runs: "stopper" stops even messages, so
	// the two after it get only the odd ones.
	subs := []sub{
		{"all-1", "o:*", protocol.PolicyContinueAll, messages},
		{"onstop", "o:t*", protocol.PolicyStopOnStop, messages},
		{"all-2", "o:?", protocol.PolicyContinueAll, messages},
		{"stopper", "o*", protocol.PolicyStopOnProcessed, messages},
		{"after-1", "o:[t]", protocol.PolicyContinueAll, messages / 2},
		{"after-2", "o:t", protocol.PolicyStopOnProcessed, messages / 2},
	}
	got := make([][]int, len(subs))
	var wg sync.WaitGroup
	for i := len(subs) - 1; i >= 0; i-- {
		s := subs[i]
		c := bustest.Dial(t, subURL(i))
		c.Initialize(s.name)
		c.Subscribe(s.pattern, s.policy)
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = receiveInOrder(t, c, s.name, s.want)
		}()
	}
	pub := bustest.Dial(t, pubURL)
	pub.Initialize("pub")
	for n := range messages {
		pub.Send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"sendMessage","params":{"topic":"o:t","payload":{"type":"seq","n":%d}},"id":%d}`, n, n))
	}
	for range messages {
		pub.RecvResult(nil)
	}
	wg.Wait()
	for i, s := range subs {
		require.Len(t, got[i], s.want, s.name)
		for k := 1; k < len(got[i]); k++ {
			if got[i][k] <= got[i][k-1] {
				t.Fatalf("%s received message %d after %d", s.name, got[i][k], got[i][k-1])
			}
		}
	}
}

// receiveInOrder reads want deliveries on c and returns their payloads'
// n in the order they arrived. "stopper" answers processed for even n;
// everyone else answers not processed. Answers go out in batches of
// eight from a goroutine of their own, so the bus has several
// deliveries in flight to each subscriber.
func receiveInOrder(t *testing.T, c *bustest.Client, name string, want int) []int {
	var order []int
	answers := make(chan []byte, want)
	defer close(answers)
	go func() {
		var batch [][]byte
		for a := range answers {
			batch = append(batch, a)
			if len(batch) < 8 && len(answers) > 0 {
				continue
			}
			for _, b := range batch {
				if err := c.WS.Write(context.Background(), websocket.MessageText, b); err != nil {
					return
				}
			}
			batch = batch[:0]
		}
	}()
	for len(order) < want {
		frame, err := c.RecvWithin(bustest.Timeout)
		if err != nil {
			t.Errorf("%s: after %d deliveries: %v", name, len(order), err)
			return order
		}
		var req struct {
			ID     json.RawMessage               `json:"id"`
			Params protocol.ProcessMessageParams `json:"params"`
		}
		if err := json.Unmarshal(frame, &req); err != nil {
			t.Errorf("%s: %v", name, err)
			return order
		}
		var p struct{ N int }
		_ = json.Unmarshal(req.Params.Payload, &p)
		order = append(order, p.N)
		processed := name == "stopper" && p.N%2 == 0
		answers <- []byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"processed":` + strconv.FormatBool(processed) + `}}`)
	}
	assert.Len(t, order, want, name)
	return order
}
