package bus_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// series returns the label sets of metric name in the registry, as
// "label=value,..." strings, and their values.
func series(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestUnknownMethodsShareOneSeries: made-up method names, before and
// after initialize, all count under method="unknown", so no client can
// grow the metrics registry.
func TestUnknownMethodsShareOneSeries(t *testing.T) {
	srv := bustest.Start(t, nil)
	c := bustest.Dial(t, srv.URL)
	call := func() {
		r := c.Call(fmt.Sprintf("rnd_%x", rand.Uint64()), map[string]any{})
		require.NotNil(t, r.Error)
		assert.EqualValues(t, protocol.CodeMethodNotFound, r.Error.Code)
	}
	for range 100 {
		call()
	}
	c.Initialize("probe")
	for range 100 {
		call()
	}
	c.MustCall(protocol.MethodPing, map[string]any{}, nil)

	got := series(t, srv.Registry(), "bub_requests_total")
	assert.Equal(t, map[string]float64{
		fmt.Sprintf("method=unknown,outcome=%d,", protocol.CodeMethodNotFound): 200,
		"method=initialize,outcome=ok,":                                        1,
		"method=ping,outcome=ok,":                                              1,
	}, got)
}

// runningOnStore starts a bus on a file store holding 50 dead letters and
// returns it, the store's path and an initialized client.
func runningOnStore(t *testing.T) (*bustest.Server, string, *bustest.Client) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	for i := range 50 {
		_, err := st.DeadLetter("", &store.DeadLetter{
			Message: store.Message{ID: fmt.Sprint("m-", i), Topic: "jobs:x", From: "pub", Payload: []byte(`{"type":"job"}`), PublishedAt: time.Now()},
			Reason:  protocol.ReasonMaxRetries, DeadAt: time.Now(),
		})
		require.NoError(t, err)
	}
	srv := bustest.Start(t, &bus.Options{Store: st})
	c := bustest.Connect(t, srv.URL, "ops", nil)
	require.Len(t, dlqList(t, c, protocol.DLQListParams{}).Entries, 50)
	return srv, filepath.Join(dir, store.FileName), c
}

// TestStoreDamagedWhileRunning: damage done to the file under a running
// bus (Open's checks cannot see it) fails the requests that read it with
// -32603, and the bus goes on serving. Truncation makes bbolt's mmap
// fault (SIGBUS), which only debug.SetPanicOnFault in the request
// goroutine turns into something recoverable.
func TestStoreDamagedWhileRunning(t *testing.T) {
	const pageSize = 4096
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"pages overwritten", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			require.NoError(t, err)
			defer f.Close()
			info, err := f.Stat()
			require.NoError(t, err)
			junk := make([]byte, info.Size()-2*pageSize)
			for i := range junk {
				junk[i] = byte(rand.Uint32())
			}
			_, err = f.WriteAt(junk, 2*pageSize)
			require.NoError(t, err)
		}},
		{"file truncated", func(t *testing.T, path string) {
			require.NoError(t, os.Truncate(path, 2*pageSize))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, path, c := runningOnStore(t)
			tt.damage(t, path)

			for range 3 {
				r := c.Call(protocol.MethodDLQList, protocol.DLQListParams{})
				require.NotNil(t, r.Error, "dlq.list on a damaged store: %s", r.Result)
				assert.EqualValues(t, protocol.CodeInternalError, r.Error.Code, r.Error.Message)
			}
			// The bus is still there for everyone.
			c.MustCall(protocol.MethodPing, map[string]any{}, nil)
			bustest.Connect(t, srv.URL, "late", nil).MustCall(protocol.MethodPing, map[string]any{}, nil)

			// The same scrape may already count the store gauges' own
			// recovered faults (where=metrics_scrape): only the requests'
			// count is fixed.
			assert.Equal(t, 3.0, series(t, srv.Registry(), "bub_panics_total")["where=request,"])
			assert.Equal(t, 3.0, series(t, srv.Registry(), "bub_requests_total")[fmt.Sprintf("method=dlq.list,outcome=%d,", protocol.CodeInternalError)])
			// The store gauges read the damaged file too, at scrape time.
			assert.Equal(t, map[string]float64{"": -1}, series(t, srv.Registry(), "bub_dead_letters"))
		})
	}
}

// TestDamagedRecordWhileRunning: a record changed in the file under a
// running bus fails the dlq.* calls that read it with -32603 naming the
// record and the file, not its bytes, never an invalid-params error; its
// neighbours read, and the operator can remove it by id.
func TestDamagedRecordWhileRunning(t *testing.T) {
	_, path, c := runningOnStore(t)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	for i := 0; ; {
		j := bytes.Index(data[i:], []byte(`"id":"m-7"`))
		if j < 0 {
			break
		}
		_, err := f.WriteAt([]byte("M"), int64(i+j+len(`"id":"`)))
		require.NoError(t, err)
		i += j + 1
	}
	require.NoError(t, f.Close())

	const id = "d-000000000008"
	for _, call := range []struct {
		method string
		params any
	}{
		{protocol.MethodDLQGet, protocol.DLQGetParams{ID: id}},
		{protocol.MethodDLQList, protocol.DLQListParams{}},
		{protocol.MethodDLQPurge, protocol.DLQPurgeParams{DLQFilter: protocol.DLQFilter{Reason: protocol.ReasonMaxRetries}}},
	} {
		r := c.Call(call.method, call.params)
		require.NotNil(t, r.Error, call.method)
		assert.EqualValues(t, protocol.CodeInternalError, r.Error.Code, r.Error.Message)
		assert.Contains(t, r.Error.Message, "decode deadletters record "+id+": damaged record: the record fails its CRC-32C checksum")
		assert.Contains(t, r.Error.Message, "(in "+path+")")
		assert.NotContains(t, r.Error.Message, "M-7")
	}
	c.MustCall(protocol.MethodDLQGet, protocol.DLQGetParams{ID: "d-000000000007"}, nil)
	c.MustCall(protocol.MethodDLQPurge, protocol.DLQPurgeParams{ID: id}, nil)
	require.Len(t, dlqList(t, c, protocol.DLQListParams{}).Entries, 49)
}
