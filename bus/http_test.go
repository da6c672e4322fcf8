package bus_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/bub-bus/bub/bus/bustest"
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

// messageID is the messageId of a 201 (bustest.Answer's).
func (a httpAnswer) messageID(t *testing.T) string {
	t.Helper()
	return bustest.Answer{Status: a.status, Body: a.body}.MessageID(t)
}

// httpDo sends a request to srv over real HTTP and records what path,
// method and status it got.
func httpDo(t *testing.T, srv *bustest.Server, method, target, body string, header map[string]string) httpAnswer {
	t.Helper()
	a := bustest.Do(t, method, srv.HTTP.URL+target, body, header)
	status, h, b := a.Status, a.Header, a.Body
	path, _, _ := strings.Cut(target, "?")
	if strings.HasPrefix(path, protocol.PathCallbacks) {
		path = protocol.PathCallbacks + "{id}"
	}
	httpSeen.Lock()
	httpSeen.m[fmt.Sprintf("%s %s %d", path, strings.ToLower(method), status)] = true
	httpSeen.Unlock()
	return httpAnswer{status: status, header: h, body: b}
}

func bearerHeader(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// TestHTTPOpenAPIMatchesHandlers checks the tool callbacks' statuses
// against /v1/openapi.json (bus/httpapi serves it; each add-on checks
// its own paths): every one this package's tests got is documented, and
// every one documented was got. It runs the tests that get them, so it
// stands alone under -run.
func TestHTTPOpenAPIMatchesHandlers(t *testing.T) {
	openAPIDoc, err := os.ReadFile("httpapi/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	toolCallbackStatuses(t)
	httpSeen.Lock()
	defer httpSeen.Unlock()
	bustest.CheckOpenAPI(t, openAPIDoc, httpSeen.m, func(path string) bool { return strings.HasPrefix(path, protocol.PathCallbacks) })
}
