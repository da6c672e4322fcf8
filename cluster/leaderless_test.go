package cluster

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestIsLeaderless: the answers JetStream gives while it elects a leader
// are asked again; any other failure is returned.
func TestIsLeaderless(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"no responders", nats.ErrNoResponders, true},
		{"cluster unavailable (client API)", &nats.APIError{Code: 503, ErrorCode: nats.JSErrCodeJetStreamNotAvailable, Description: "JetStream system temporarily unavailable"}, true},
		{"cluster unavailable (jetstream API)", &jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"}, true},
		{"wrapped", fmt.Errorf("watch: %w", &nats.APIError{Code: 503}), true},
		{"stream not found", &nats.APIError{Code: 404, ErrorCode: nats.JSErrCodeStreamNotFound}, false},
		{"bad request", &jetstream.APIError{Code: 400}, false},
		{"deadline", context.DeadlineExceeded, false},
		{"nil", nil, false},
	} {
		if got := isLeaderless(tt.err); got != tt.want {
			t.Errorf("%s: isLeaderless(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
