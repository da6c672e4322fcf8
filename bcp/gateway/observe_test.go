package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/bustest"
)

// TestClientEventsGoOnToOthers: the gateway watches the bus's client
// events without keeping them from older subscribers, such as the
// spawner, which waits for an agent's subscription before it routes the
// agent its first message.
func TestClientEventsGoOnToOthers(t *testing.T) {
	f := newFixture(t)
	// Its own pattern, as the spawner's: a subscription to the identical
	// pattern would be overridden by the newer one, by design.
	observer := f.dial("observer", "system:client.*")
	f.gateway(nil)
	f.agent("main")
	deadline := time.After(bustest.Timeout)
	for {
		select {
		case d := <-observer.inbox:
			if strings.Contains(string(d.Payload), `"client_id":"main"`) {
				return
			}
		case <-deadline:
			t.Fatal("the observer never heard of main's subscription: the gateway stopped the event")
		}
	}
}
