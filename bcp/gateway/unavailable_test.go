package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
)

func alertsPush() map[string]any {
	return map[string]any{"type": TypeResponse, "subscription_id": "alerts", "controller": "main",
		"response": map[string]any{"urgent": true, "priority": "high"}}
}

// An absent Controller is not unavailable: the bus holds agent:main, the
// Reader hears success, and the push reaches main when it connects.
func TestPushToAbsentControllerIsHeld(t *testing.T) {
	f := newFixture(t)
	f.gateway(nil)
	researcher := f.agent("researcher")
	researcher.expect(TypeSubscriptionsActive)
	if _, ack := researcher.send(TopicResponse, alertsPush()); !ack.Processed {
		t.Fatalf("publish refused: %s", ack.Message)
	}
	if vr := researcher.expect(TypeValidationResult); vr["success"] != true || vr["code"] != nil {
		t.Fatalf("validation result = %v, want success: the bus holds the delivery", vr)
	}
	main := f.agent("main")
	if del := main.expect(TypeResponseDelivery); del["subscription_id"] != "alerts" {
		t.Fatalf("held delivery = %v", del)
	}
}

// On a bus that does not hold agent:* (HoldPatterns empty), a push to a
// Controller that is not subscribed can be neither routed nor held: the
// Reader's one validation result is controller_unavailable, and the audit
// log says so.
func TestPushControllerUnavailable(t *testing.T) {
	f := newFixtureWith(t, func(o *bus.Options) { o.HoldPatterns = []string{} })
	g := f.gateway(nil)
	researcher := f.agent("researcher")
	researcher.expect(TypeSubscriptionsActive)
	// The ack only says the push is valid and queued: the bus answers
	// for the delivery after it.
	if _, ack := researcher.send(TopicResponse, alertsPush()); !ack.Processed {
		t.Fatalf("publish refused: %s", ack.Message)
	}
	vr := researcher.expect(TypeValidationResult)
	if vr["success"] != false || vr["code"] != CodeControllerUnavailable || vr["subscription_id"] != "alerts" ||
		!strings.Contains(vr["detail"].(string), `controller "main" is unavailable`) {
		t.Fatalf("validation result = %v, want controller_unavailable", vr)
	}
	researcher.quiet()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		recs, err := g.Audit(0)
		require.NoError(c, err)
		for _, r := range recs {
			if r.Event == "publish" && r.Outcome == CodeControllerUnavailable && r.SubscriptionID == "alerts" && r.Controller == "main" {
				return
			}
		}
		c.Errorf("no controller_unavailable audit record among %d", len(recs))
	}, bustest.Timeout, 10*time.Millisecond)

	// Connected, main gets the next push and the Reader hears success.
	main := f.agent("main")
	if _, ack := researcher.send(TopicResponse, alertsPush()); !ack.Processed {
		t.Fatalf("second publish refused: %s", ack.Message)
	}
	main.expect(TypeResponseDelivery)
	if vr := researcher.expect(TypeValidationResult); vr["success"] != true {
		t.Fatalf("validation result = %v, want success", vr)
	}
}
