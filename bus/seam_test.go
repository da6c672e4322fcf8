package bus_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestSingleNodeLinksNoNATS: an embedder of the bus that does not use a
// cluster does not link NATS; only package cluster does.
func TestSingleNodeLinksNoNATS(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list the bus's dependencies")
	}
	// bustest too: every test package that starts a bus links it, and
	// only those that start a cluster (clustertest) should link NATS.
	for _, pkg := range []string{"github.com/bub-bus/bub/bus", "github.com/bub-bus/bub/bus/bustest"} {
		out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for dep := range strings.Lines(string(out)) {
			if strings.Contains(dep, "nats-io") || strings.TrimSpace(dep) == "github.com/bub-bus/bub/cluster" {
				t.Errorf("package %s depends on %s", pkg, strings.TrimSpace(dep))
			}
		}
	}
}

// TestRequestsKeepOrder: requests a peer sends at once are handled in the
// order it sent them, also those read while a subscribe, unsubscribe or
// initialize is under way off the read loop.
func TestRequestsKeepOrder(t *testing.T) {
	srv := bustest.Start(t, nil)
	c := bustest.Dial(t, srv.URL)
	frames := []string{
		`{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"burst"},"id":1}`,
		`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"burst:a"},"id":2}`,
		`{"jsonrpc":"2.0","method":"ping","id":3}`,
		`{"jsonrpc":"2.0","method":"unsubscribe","params":{"topic":"burst:a"},"id":4}`,
		`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"burst:a"},"id":5}`,
		`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"burst:a"},"id":6}`,
	}
	for _, f := range frames {
		c.Send(f)
	}
	for i := range frames {
		r := c.RecvResponse()
		assert.JSONEq(t, strconv.Itoa(i+1), string(r.ID), "answers in the order of the requests")
		if i+1 == 6 {
			require.NotNil(t, r.Error, "a second subscribe to burst:a after the first")
			assert.EqualValues(t, protocol.CodeAlreadySubscribed, r.Error.Code)
		} else {
			assert.Nil(t, r.Error, "request %d", i+1)
		}
	}
}
