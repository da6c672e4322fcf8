package bus_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/httpapi"
	"github.com/bub-bus/bub/protocol"
)

// httpSeen records every path, method and status the HTTP doors
// answered in this package's tests, for TestHTTPOpenAPIMatchesHandlers.
var httpSeen = struct {
	sync.Mutex
	m map[string]bool
}{m: map[string]bool{}}

// httpAnswer is an HTTP API answer, read whole.
type httpAnswer struct {
	status int
	header http.Header
	body   []byte
}

// errorCode is the JSON-RPC code of an error answer, 0 for another.
func (a httpAnswer) errorCode() int64 {
	var e struct {
		Error *protocol.Error `json:"error"`
	}
	if json.Unmarshal(a.body, &e) != nil || e.Error == nil {
		return 0
	}
	return e.Error.Code
}

// messageID is the messageId of a 201.
func (a httpAnswer) messageID(t *testing.T) string {
	t.Helper()
	var r struct {
		MessageID string `json:"messageId"`
	}
	if err := json.Unmarshal(a.body, &r); err != nil || r.MessageID == "" {
		t.Fatalf("answer %d %s has no messageId (%v)", a.status, a.body, err)
	}
	return r.MessageID
}

// httpDo sends a request to srv over real HTTP and records what path,
// method and status it got.
func httpDo(t *testing.T, srv *bustest.Server, method, target, body string, header map[string]string) httpAnswer {
	t.Helper()
	a := bustest.Do(t, method, srv.HTTP.URL+target, body, header)
	status, h, b := a.Status, a.Header, a.Body
	path, _, _ := strings.Cut(target, "?")
	if strings.HasPrefix(path, bus.PathCallbacks) {
		path = bus.PathCallbacks + "{id}"
	}
	httpSeen.Lock()
	httpSeen.m[fmt.Sprintf("%s %s %d", path, strings.ToLower(method), status)] = true
	httpSeen.Unlock()
	return httpAnswer{status: status, header: h, body: b}
}

func bearerHeader(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// TestHTTPOpenAPIMatchesHandlers checks that every path, method and
// status the HTTP tests of the doors in this package got is in
// /v1/openapi.json (bus/httpapi serves it, and checks its own paths),
// and that every one the document lists for these paths was got: the
// document is the handlers'. It runs the tests that get them, so it
// stands alone under -run.
func TestHTTPOpenAPIMatchesHandlers(t *testing.T) {
	openAPIDoc, err := os.ReadFile("httpapi/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	TestToolSubscriptionEvents(t)
	TestToolSubscriptionBadEvents(t)
	TestToolSubscriptionRateLimited(t)
	TestJournalStatuses(t)
	var doc struct {
		OpenAPI string                                                   `json:"openapi"`
		Paths   map[string]map[string]struct{ Responses map[string]any } `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q; want 3.1.0", doc.OpenAPI)
	}
	var documented []string
	for p, ops := range doc.Paths {
		if httpAPIPath(p) {
			continue
		}
		for m, op := range ops {
			for status := range op.Responses {
				documented = append(documented, fmt.Sprintf("%s %s %s", p, m, status))
			}
		}
	}
	httpSeen.Lock()
	defer httpSeen.Unlock()
	var seen []string
	for k := range httpSeen.m {
		// 405 answers a method the path does not list, as the document
		// says.
		var p, m string
		var status int
		_, err := fmt.Sscanf(k, "%s %s %d", &p, &m, &status)
		if httpAPIPath(p) {
			continue
		}
		if err == nil && status == 405 {
			if _, listed := doc.Paths[p][m]; listed || doc.Paths[p] == nil {
				t.Errorf("405 for %s %s, a path and method the document lists (or a path it does not)", m, p)
			}
			continue
		}
		seen = append(seen, k)
	}
	slices.Sort(documented)
	slices.Sort(seen)
	if !slices.Equal(documented, seen) {
		t.Errorf("openapi.json documents\n  %s\nthe handlers answered\n  %s", strings.Join(documented, "\n  "), strings.Join(seen, "\n  "))
	}
}

// httpAPIPath reports whether an add-on that checks its own statuses
// against the document serves path p: bus/httpapi, bus/webhook
// (TestHookOpenAPI).
func httpAPIPath(p string) bool {
	return p == httpapi.PathMessages || p == httpapi.PathOpenAPI || p == "/v1/hooks/{name}"
}
