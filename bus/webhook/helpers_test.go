package webhook_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/webhook"
	"github.com/bub-bus/bub/internal/leakcheck"
)

// TestMain fails the run when goroutines outlive the tests: Shutdown
// must end every call of a webhook URL and leave no connection idle.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// start starts a bus with opts (nil: the defaults) and the webhooks of
// w, and stops it when the test ends.
func start(t *testing.T, opts *bus.Options, w webhook.Options) *bustest.Server {
	t.Helper()
	var o bus.Options
	if opts != nil {
		o = *opts
	}
	o.Extensions = append(slices.Clip(o.Extensions), webhook.New(w))
	return bustest.Start(t, &o)
}

// seen records the statuses the hooks answered POSTs with, for
// TestHookOpenAPI.
var seen = struct {
	sync.Mutex
	statuses map[string]bool
}{statuses: map[string]bool{}}

// do sends a request to srv over real HTTP and records the status a
// POST to a hook got.
func do(t *testing.T, srv *bustest.Server, method, target, body string, header map[string]string) bustest.Answer {
	t.Helper()
	a := bustest.Do(t, method, srv.HTTP.URL+target, body, header)
	if method == http.MethodPost && strings.HasPrefix(target, webhook.PathHooks) {
		seen.Lock()
		seen.statuses[fmt.Sprint(a.Status)] = true
		seen.Unlock()
	}
	return a
}

// metric returns the value of the bus metric name with the given label
// value ("" for none), or -1 when it is not there.
func metric(t *testing.T, srv *bustest.Server, name, label string) float64 {
	t.Helper()
	return bustest.Metric(t, srv.Registry(), name, label)
}

// TestHookOpenAPI checks that the statuses /v1/openapi.json lists for
// POST /v1/hooks/{name} are those the hooks answered: the document is
// the handler's. It runs the test that gets them, so it stands alone
// under -run.
func TestHookOpenAPI(t *testing.T) {
	TestHookStatuses(t)
	raw, err := os.ReadFile("../httpapi/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct{ Responses map[string]any } `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	ops := doc.Paths[webhook.PathHooks+"{name}"]
	if len(ops) != 1 {
		t.Fatalf("openapi.json lists %d methods of %s{name}; want POST alone", len(ops), webhook.PathHooks)
	}
	documented := slices.Sorted(maps.Keys(ops["post"].Responses))
	seen.Lock()
	defer seen.Unlock()
	got := slices.Sorted(maps.Keys(seen.statuses))
	if !slices.Equal(documented, got) {
		t.Errorf("openapi.json documents %v for POST %s{name}; the hooks answered %v", documented, webhook.PathHooks, got)
	}
}
