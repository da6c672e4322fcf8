package protocol_test

import (
	"testing"

	"github.com/bub-bus/bub/protocol"
)

// TestPolicyRule: MayStop says whether some answer makes Stops true, for
// every policy and for one no version knows, so a walk never waits on an
// answer that cannot stop it, nor skips one that can.
func TestPolicyRule(t *testing.T) {
	for _, p := range append(protocol.Policies, "bogus", "") {
		some := false
		for _, processed := range []bool{false, true} {
			for _, stop := range []bool{false, true} {
				some = some || p.Stops(processed, stop)
			}
		}
		if p.MayStop() != some {
			t.Errorf("policy %q: MayStop %v, but Stops is true for some answer: %v", p, p.MayStop(), some)
		}
	}
}
