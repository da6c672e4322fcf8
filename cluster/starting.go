package cluster

import (
	"context"
	"strings"
	"sync"
	"time"
)

// startReportEvery is how often a node still starting says what it
// waits for.
const startReportEvery = 10 * time.Second

// startState is the step Start is retrying and how its last try failed.
type startState struct {
	// mu guards the fields below.
	mu      sync.Mutex
	step    string
	lastErr error
}

func (s *startState) tried(step string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.step, s.lastErr = step, err
}

// reportWaiting logs, every startReportEvery until the returned function
// is called, what Start is waiting for and which routes are unreachable:
// a node waits for a majority of the nodes to elect JetStream's leaders,
// for as long as StartTimeout, and an operator must see why.
func (n *Node) reportWaiting(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	started := time.Now()
	go func() {
		defer close(done)
		t := time.NewTicker(startReportEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n.startState.mu.Lock()
			step, lastErr := n.startState.step, n.startState.lastErr
			n.startState.mu.Unlock()
			attrs := []any{"waited", time.Since(started).Round(time.Second), "step", step, "last_error", lastErr}
			if n.serverLog != nil {
				attrs = append(attrs, "nodes", n.size, "routes_unreachable", strings.Join(n.serverLog.routes.unreachable(), ","))
			}
			n.log.Warn("cluster node still starting: JetStream needs a majority of the nodes up and routed", attrs...)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
