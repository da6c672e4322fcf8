// Package drain runs work off its caller's path that a shutdown waits
// for: once the shutdown begins, no more work starts, and what is under
// way gets until a deadline to finish.
package drain

import (
	"context"
	"sync"
)

// Group is work a shutdown waits for. The zero value is ready to use.
type Group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f on a goroutine of its own, unless Close has begun: then f
// does not run, its work being left to whoever acts after the shutdown,
// and Go reports false.
func (g *Group) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

// Close refuses more work and waits for the work under way until ctx
// ends, and then returns ctx's error.
func (g *Group) Close(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
