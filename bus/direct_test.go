package bus_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// A batch of sendMessages read together is relayed on the read loop and
// reaches its subscriber in one write call, which leaves once the batch
// is handled (direct.go, outbound.Batch); every publish gets its result.
// The batch is one JSON-RPC batch, so it is one read however the machine
// schedules.
func TestRelayBatchLeavesInOneWrite(t *testing.T) {
	const n = 20
	srv := bustest.Start(t, &bus.Options{MaxInFlight: n})
	bustest.Connect(t, srv.URL, "sub", bustest.Processed).Subscribe("batch", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	writes0, frames0 := bus.ClientConn(srv.Server, "sub").WriteStats()

	reqs := make([]string, n)
	for i := range reqs {
		reqs[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sendMessage","params":{"topic":"batch","payload":{"type":"n%d"}}}`, i, i)
	}
	pub.Send("[" + strings.Join(reqs, ",") + "]")
	var answers []struct {
		ID     int
		Result protocol.SendMessageResult
		Error  *protocol.Error
	}
	require.NoError(t, json.Unmarshal(pub.Recv(), &answers))
	require.Len(t, answers, n)
	for _, a := range answers {
		require.Nil(t, a.Error, "publish %d", a.ID)
		require.True(t, a.Result.Success, "publish %d", a.ID)
		require.Len(t, a.Result.Acks, 1)
		require.True(t, a.Result.Acks[0].Processed, "publish %d", a.ID)
	}
	writes, frames := bus.ClientConn(srv.Server, "sub").WriteStats()
	require.Equal(t, uint64(n), frames-frames0, "processMessage frames to the subscriber")
	require.Equal(t, uint64(1), writes-writes0, "write calls to the subscriber for one batch read")
}
