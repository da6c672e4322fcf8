package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/protocol"
)

// TestCrashLosesNothing kills bub serve with SIGKILL at a random moment
// while publishers get retries and holds announced, restarts it on the
// same data directory, and checks that every message whose result
// announced a retry or a hold is afterwards delivered or dead-lettered.
func TestCrashLosesNothing(t *testing.T) {
	t.Parallel()
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	for round := range rounds {
		t.Run(fmt.Sprint("round-", round), func(t *testing.T) {
			crashRound(t)
		})
	}
}

func crashRound(t *testing.T) {
	dir := t.TempDir()
	flags := []string{"--retry-base-delay", "100ms", "--retry-delay-cap", "300ms", "--max-attempts", "100", "--log-level", "warn"}
	d := startBus(t, dir, flags...)

	// The worker asks for a retry of everything, so its messages stay
	// pending in the store; agent:absent-* has nobody, so those are held.
	worker := bustest.Connect(t, d.url, "worker", func(protocol.ProcessMessageParams) any {
		return protocol.ProcessMessageResult{ShouldRetry: true, Message: "not yet"}
	})
	worker.Subscribe("jobs:*", "")

	var mu sync.Mutex
	announced := map[string]string{} // messageId → topic
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range 4 {
		pub := bustest.Dial(t, d.url)
		pub.Initialize(fmt.Sprint("pub-", p))
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				topic := fmt.Sprintf("jobs:%d-%d", p, i)
				if i%2 == 1 {
					topic = fmt.Sprintf("agent:absent-%d-%d", p, i)
				}
				r := pub.Call(protocol.MethodSendMessage, map[string]any{"topic": topic, "payload": map[string]any{"type": "job"}})
				if r.Error != nil {
					return // the bus died under us: this message was never announced
				}
				var res protocol.SendMessageResult
				if err := json.Unmarshal(r.Result, &res); err != nil {
					t.Errorf("result %s: %v", r.Result, err)
					return
				}
				if res.Held || (len(res.Acks) == 1 && res.Acks[0].Retrying) {
					mu.Lock()
					announced[res.MessageID] = topic
					mu.Unlock()
				}
			}
		})
	}
	// Without a message announced before the kill the test would prove
	// nothing.
	checkfor.Check(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(announced) == 0 {
			return fmt.Errorf("no message announced yet; bus log: %s", d.stderr)
		}
		return nil
	})
	// A crash (SIGKILL) at a random moment of the load.
	time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond) // the behaviour under test, not a wait
	d.kill()
	close(stop)
	mu.Lock()
	// Calls answered after the kill cannot exist; the set is final.
	want := len(announced)
	mu.Unlock()
	wg.Wait()

	d = startBus(t, dir, flags...)
	var dmu sync.Mutex
	delivered := map[string]bool{}
	record := func(p protocol.ProcessMessageParams) any {
		dmu.Lock()
		delivered[p.MessageID] = true
		dmu.Unlock()
		return protocol.ProcessMessageResult{Processed: true}
	}
	bustest.Connect(t, d.url, "worker", record).Subscribe("jobs:*", "")
	bustest.Connect(t, d.url, "absentee", record).Subscribe("agent:absent-*", "")
	ops := bustest.Connect(t, d.url, "ops", nil)

	lost := func() []string {
		dead := map[string]bool{}
		cursor := ""
		for {
			var page protocol.DLQListResult
			ops.MustCall(protocol.MethodDLQList, protocol.DLQListParams{Cursor: cursor}, &page)
			for _, e := range page.Entries {
				dead[e.MessageID] = true
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		dmu.Lock()
		defer dmu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		var missing []string
		for id, topic := range announced {
			if !delivered[id] && !dead[id] {
				missing = append(missing, id+" ("+topic+")")
			}
		}
		return missing
	}
	checkfor.Check(t, 60*time.Second, func() error {
		if missing := lost(); len(missing) > 0 {
			return fmt.Errorf("%d of %d announced messages lost after the crash: %v\nbus log: %s", len(missing), want, missing[:min(len(missing), 10)], d.stderr)
		}
		return nil
	})
	t.Logf("%d announced messages, all delivered or dead-lettered after the crash", want)
	d.stop(t)
}
