package jswrite_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/internal/jswrite"
)

func TestTryUntil(t *testing.T) {
	other := errors.New("not found")
	for _, tc := range []struct {
		name  string
		errs  []error // f's answers, in turn; nil ends
		tries int
		want  error
	}{
		{"answered at once", []error{nil}, 1, nil},
		{"unanswered, then answered", []error{nats.ErrTimeout, context.DeadlineExceeded, nil}, 3, nil},
		{"no responders, then answered", []error{nats.ErrNoResponders, nil}, 2, nil},
		{"no leader, then answered", []error{&jetstream.APIError{Code: 503}, nil}, 2, nil},
		{"another error is not tried again", []error{other}, 1, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			err := jswrite.TryUntil(t.Context(), 0, func(ctx context.Context) error {
				if _, ok := ctx.Deadline(); !ok {
					t.Error("a try without a deadline")
				}
				tries++
				return tc.errs[tries-1]
			})
			if !errors.Is(err, tc.want) || tries != tc.tries {
				t.Fatalf("got %v after %d tries, want %v after %d", err, tries, tc.want, tc.tries)
			}
		})
	}
}

func TestTryUntilStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	tries := 0
	err := jswrite.TryUntil(ctx, 0, func(context.Context) error {
		tries++
		cancel()
		return nats.ErrTimeout
	})
	if !errors.Is(err, nats.ErrTimeout) || tries != 1 {
		t.Fatalf("got %v after %d tries, want the timeout after 1", err, tries)
	}
}
