package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A KV watch is an ordered consumer on the bucket's stream. When the
// node hosting it dies, the watch notices only by its idle heartbeat and
// then waits for the stream's new leader: the tests measured up to 20 s
// with nothing applied, meanwhile a subscription made on a surviving node
// was not routed to, and a hold taken over was not woken; and when the
// client library fails to make the consumer again it drops the
// subscription, and the watch applies nothing more, for ever. (A node
// was seen applying nothing of BUB_SUBS for 40 s after another node left
// cleanly or restarted at once, in TestDurableClusterNodeRestart.) So every
// watch is started again, from the revision after the last one it
// applied, as soon as a node is presumed dead, leaves, or registers
// (it may have restarted unnoticed), and when the client library reports that it
// could not make an ordered consumer again (restartWatches); an entry the
// old and the new watch both deliver is applied once.

// watch applies a bucket's entries, in revision order, for the node's
// life, and can be started again where it was.
type watch struct {
	n    *Node
	kv   jetstream.KeyValue
	name string
	// apply handles one entry; initial is set for the values the bucket
	// held when the node started.
	apply func(e jetstream.KeyValueEntry, initial bool)

	// mu guards w, last and stopped, and makes each apply one step.
	mu      sync.Mutex
	w       jetstream.KeyWatcher
	last    uint64
	stopped bool

	// restarting makes restarts one at a time: one asked for during
	// another is made after it.
	restarting sync.Mutex
}

// startWatch starts watching kv and returns once the current values are
// applied (unless updatesOnly: then at once).
func (n *Node) startWatch(ctx context.Context, kv jetstream.KeyValue, name string, updatesOnly bool, apply func(jetstream.KeyValueEntry, bool)) error {
	wt := &watch{n: n, kv: kv, name: name, apply: apply}
	var opts []jetstream.WatchOpt
	if updatesOnly {
		opts = append(opts, jetstream.UpdatesOnly())
	}
	// The watch lives as long as the node, not as long as Start's ctx;
	// its consumer cannot be made while the stream elects a leader.
	var w jetstream.KeyWatcher
	err := n.retryUntil(ctx, "watch "+name, 5*time.Second, 200*time.Millisecond, func(context.Context) error {
		var err error
		w, err = kv.WatchAll(n.ctx, opts...)
		return err
	})
	if err != nil {
		return err
	}
	wt.w = w
	n.watchMu.Lock()
	n.watches = append(n.watches, wt)
	n.watchMu.Unlock()
	loaded := make(chan struct{})
	if updatesOnly {
		close(loaded)
	}
	n.goFunc(func() { wt.read(w, !updatesOnly, loaded) })
	select {
	case <-loaded:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("load %s: %w", name, ctx.Err())
	}
}

// read applies what w delivers until its channel closes, which Stop
// does. It reads to the end even after the node closed: the watcher's
// callback blocks on a full channel, and would never see its
// subscription end. initial is set until the end of the current values,
// when loaded (if not nil) is closed.
func (wt *watch) read(w jetstream.KeyWatcher, initial bool, loaded chan struct{}) {
	for e := range w.Updates() {
		if e == nil {
			if initial {
				initial = false
				close(loaded)
			}
			continue
		}
		wt.mu.Lock()
		if e.Revision() > wt.last {
			wt.last = e.Revision()
			wt.apply(e, initial)
		}
		wt.mu.Unlock()
	}
}

// watchRetry is the pause between tries to start a watch again.
const watchRetry = time.Second

// restart starts the watch again after the last revision applied and
// stops the old one. A try that fails (JetStream electing leaders, as
// around a node's death or leaving) is made again until one succeeds or
// the node closes, the old watch going on meanwhile: it may be the one
// that applies nothing more.
func (wt *watch) restart() {
	wt.restarting.Lock()
	defer wt.restarting.Unlock()
	for try := 1; ; try++ {
		wt.mu.Lock()
		from, stopped := wt.last+1, wt.stopped
		wt.mu.Unlock()
		if stopped {
			return
		}
		w, err := wt.kv.WatchAll(wt.n.ctx, jetstream.ResumeFromRevision(from))
		if err == nil {
			if try > 1 {
				wt.n.log.Info("cluster: watch started again", "bucket", wt.name, "tries", try)
			}
			wt.replace(w)
			return
		}
		if wt.n.ctx.Err() != nil {
			return
		}
		if try == 1 {
			wt.n.log.Warn("cluster: could not start a watch again; trying again, the old one going on meanwhile", "bucket", wt.name, "retry_in", watchRetry, "err", err)
		}
		select {
		case <-time.After(watchRetry):
		case <-wt.n.ctx.Done():
			return
		}
	}
}

// replace makes w, a watch started again, the watch's, and stops the one
// it replaces.
func (wt *watch) replace(w jetstream.KeyWatcher) {
	wt.mu.Lock()
	if wt.stopped {
		// The node closed meanwhile: a watcher left running would keep
		// its reader, and Close waiting on it, for ever.
		wt.mu.Unlock()
		_ = w.Stop()
		return
	}
	old := wt.w
	wt.w = w
	wt.mu.Unlock()
	if !wt.n.goFunc(func() { wt.read(w, false, nil) }) {
		_ = w.Stop()
		return
	}
	_ = old.Stop()
}

// stop stops the watch; its goroutine ends once the channel is closed.
func (wt *watch) stop() {
	wt.mu.Lock()
	wt.stopped = true
	w := wt.w
	wt.mu.Unlock()
	_ = w.Stop()
}

// orderedConsumerLost is how the client library's error reads when it
// could not make a watch's ordered consumer again, and dropped its
// subscription: it has no sentinel for it.
const orderedConsumerLost = "recreating ordered consumer"

// natsError logs an error the NATS client reports off any call (on a
// subscription), and starts the watches again when it dropped one.
func (n *Node) natsError(_ *nats.Conn, sub *nats.Subscription, err error) {
	var subject string
	if sub != nil {
		subject = sub.Subject
	}
	n.log.Warn("cluster: NATS reported an error", "subject", subject, "err", err)
	if strings.Contains(err.Error(), orderedConsumerLost) {
		n.goFunc(n.restartWatches)
	}
}

// restartWatches starts every watch of the node again (see above).
func (n *Node) restartWatches() {
	n.watchMu.Lock()
	watches := append([]*watch(nil), n.watches...)
	n.watchMu.Unlock()
	for _, wt := range watches {
		// Each on its own: one that cannot start again yet does not
		// hold up the others.
		n.goFunc(wt.restart)
	}
}
