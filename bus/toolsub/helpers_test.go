package toolsub_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/bus/toolsub"
	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/protocol"
)

// start starts a bus with opts (nil: the defaults) and tool
// subscriptions with ts, kept in the bus's store.
func start(t *testing.T, opts *bus.Options, ts toolsub.Options) *bustest.Server {
	t.Helper()
	return bustest.StartExtended(t, opts, func(st *store.Store) []bus.Extension {
		ts.Store = st
		return []bus.Extension{toolsub.New(&ts)}
	})
}

// startCluster starts a cluster of two nodes, each keeping the tool
// subscriptions in its cluster store, as cmd/bub does.
func startCluster(t *testing.T) []*bustest.Server {
	t.Helper()
	return clustertest.StartEach(t, nil, func(_ string, o *bus.Options) {
		cl := o.Cluster
		o.Extensions = append(slices.Clip(o.Extensions), bus.ExtensionFunc(func(s *bus.Server) error {
			return toolsub.New(&toolsub.Options{Store: cluster.StoreOf(cl)}).Extend(s)
		}))
	}, "n1", "n2")
}

// answer is an HTTP answer, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request to srv.
func do(t *testing.T, srv *bustest.Server, method, path, body string, header map[string]string) answer {
	t.Helper()
	a := bustest.Do(t, method, srv.HTTP.URL+path, body, header)
	return answer{status: a.Status, header: a.Header, body: a.Body}
}

// wireError is the error of an error answer, nil for another.
func (a answer) wireError() *protocol.Error {
	var e struct {
		Error *protocol.Error `json:"error"`
	}
	if json.Unmarshal(a.body, &e) != nil {
		return nil
	}
	return e.Error
}

// errorCode is the JSON-RPC code of an error answer, 0 for another.
func (a answer) errorCode() int64 {
	if e := a.wireError(); e != nil {
		return e.Code
	}
	return 0
}

// errorMessage is the message of an error answer, "" for another.
func errorMessage(a answer) string {
	if e := a.wireError(); e != nil {
		return e.Message
	}
	return ""
}
