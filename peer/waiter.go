package peer

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/bub-bus/bub/internal/rpcstream"
)

// waiter is one call's wait for its answer: the Answerer the Stream hands
// the answer to, the timer of Options.CallTimeout, and the params of a
// sendMessage. Waiters are pooled, so that a call costs no channel, no
// timer and no context of its own (a context.WithTimeout per call was
// four allocations and a lock on its parent, the largest share of a
// publisher's garbage after the answer itself).
type waiter struct {
	answer chan answer
	timer  *time.Timer
	// send holds SendMessage's params while the request is written, so
	// that they are not an allocation of their own.
	send sendRequest
}

// answer is what the Stream handed a waiter.
type answer struct {
	result json.RawMessage
	err    error
}

// Answer is called by the Stream's read loop, once per call it was
// registered for; the channel has room for it, so it never waits.
func (w *waiter) Answer(result json.RawMessage, err error) { w.answer <- answer{result, err} }

var _ rpcstream.Answerer = (*waiter)(nil)

var waiters = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{answer: make(chan answer, 1), timer: t}
}}

// getWaiter returns a waiter from the pool; give it back with put.
func getWaiter() *waiter { return waiters.Get().(*waiter) }

// put returns w to the pool. Its channel is empty and its timer stopped:
// wait leaves it so.
func (w *waiter) put() {
	w.send = sendRequest{}
	waiters.Put(w)
}

// wait sends a request for method with params on stream and waits for its
// answer, for timeout at most, and for ctx. answered reports that the
// answer came, result or err; else timedOut tells the timeout from ctx
// (ctx.Err() says why), and err is the failed write, if the request never
// left. A call given up is abandoned; if its answer was already on its way
// (Abandon says so), wait takes it from the channel before it returns,
// which the Stream hands over at once, so that the waiter can be reused.
func (w *waiter) wait(ctx context.Context, stream *rpcstream.Stream, method string, params rpcstream.ParamsAppender, timeout time.Duration) (result json.RawMessage, answered, timedOut bool, err error) {
	id, err := stream.CallAsync(method, params, w)
	if err != nil {
		return nil, false, false, err // never registered: no answer comes
	}
	// With Go 1.23's timers, Reset and Stop leave no stale tick in C.
	w.timer.Reset(timeout)
	select {
	case a := <-w.answer:
		w.timer.Stop()
		return a.result, true, false, a.err
	case <-w.timer.C:
		timedOut = true
	case <-ctx.Done():
		w.timer.Stop()
	}
	if !stream.Abandon(id) {
		<-w.answer
	}
	return nil, false, timedOut, nil
}
