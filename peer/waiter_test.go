package peer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// Calls given up just as their answer arrives leave nothing behind for
// the calls after them: the SDK reuses what a call waits with, so an
// answer left over would be handed to the next call. Every result must
// carry its own message's nonce, which the handler echoes.
func TestAbandonedCallsLeaveNoAnswerBehind(t *testing.T) {
	b := startBus(t, nil)
	sub := dial(t, b.URL, "sub", &peer.Options{MaxConcurrentHandlers: 256})
	require.NoError(t, sub.Subscribe(t.Context(), "echo", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var p struct{ N string }
		if err := d.Decode(&p); err != nil {
			return peer.Result{}, err
		}
		return peer.Result{Processed: true, Message: p.N}, nil
	}, nil))
	pub := dial(t, b.URL, "pub", nil)

	send := func(ctx context.Context, n int) error {
		nonce := strconv.Itoa(n)
		r, err := pub.SendMessage(ctx, "echo", map[string]any{"type": "echo", "n": nonce}, nil)
		if err != nil {
			return err
		}
		if len(r.Acks) != 1 || r.Acks[0].Message != nonce {
			return fmt.Errorf("message %s got the result %+v", nonce, r)
		}
		return nil
	}
	// The time an answer takes, so that contexts can end around it.
	var took time.Duration
	for i := range 20 {
		start := time.Now()
		require.NoError(t, send(t.Context(), i))
		took += time.Since(start)
	}
	took /= 20
	// Contexts that end around the time the answer comes, so that some
	// calls give up while their answer is being handed over. The bus
	// goes on with the calls given up, and may refuse new ones while
	// too many are in flight.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration(rand.Int64N(2*int64(took)+1)))
				err := send(ctx, (w+1)*1000+i)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) && protocol.CodeOf(err) != protocol.CodeTooManyRequests {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i := range 50 {
		// The bus refuses calls while those given up are still on their
		// way.
		checkfor.Check(t, 10*time.Second, func() error {
			err := send(t.Context(), 100000+i)
			if protocol.CodeOf(err) == protocol.CodeTooManyRequests {
				return err
			}
			require.NoError(t, err)
			return nil
		})
	}
}
