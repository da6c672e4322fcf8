package protocol_test

import (
	"strings"
	"testing"

	"github.com/bub-bus/bub/protocol"
)

func TestValidNodeID(t *testing.T) {
	for _, c := range []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"node-1_B", true},
		{strings.Repeat("n", protocol.MaxNodeIDLength), true},
		{"", false},
		{strings.Repeat("n", protocol.MaxNodeIDLength+1), false},
		{"a.b", false}, // a NATS subject's token separator
		{"a*", false},
		{"a>", false},
		{"a b", false},
		{"a:b", false}, // a journal cursor's separators
		{"a,b", false},
		{"=durable", false}, // the prefix of durable subscriptions' keys
		{"é", false},
	} {
		if got := protocol.ValidNodeID(c.id); got != c.want {
			t.Errorf("ValidNodeID(%q) = %v, want %v", c.id, got, c.want)
		}
	}
}
