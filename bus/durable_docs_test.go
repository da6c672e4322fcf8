package bus_test

import (
	"testing"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// replayDurable replays "Durable subscriptions": the owner watcher
// subscribes durably, goes away, and a publisher's message is held for
// it; a spawner registers as a waker.
func replayDurable(t *testing.T, exs []*docExample) {
	srv := startDocBus(t, nil)
	var watcher *bustest.Client
	for _, ex := range exs {
		switch m := ex.method(); m {
		case protocol.MethodSubscribe:
			watcher = bustest.Connect(t, srv.URL, "watcher", bustest.Processed)
			newDocPeer(t, watcher).play(ex)
		case protocol.MethodSendMessage:
			if watcher == nil {
				t.Fatalf("PROTOCOL.md:%d: the publish comes before the owner's subscribe", ex.line())
			}
			leave(t, srv.URL, watcher, "watcher")
			pub := bustest.Dial(t, srv.URL)
			pub.Initialize("pub")
			newDocPeer(t, pub).play(ex)
		case protocol.MethodSubscriptionsWaker:
			spawner := bustest.Dial(t, srv.URL)
			spawner.Initialize("spawner")
			newDocPeer(t, spawner).play(ex)
		default:
			t.Errorf("PROTOCOL.md:%d: no setup for %q; teach replayDurable", ex.line(), m)
		}
	}
}
