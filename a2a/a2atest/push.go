package a2atest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
)

// Notification is one push notification as a receiver got it.
type Notification struct {
	Path   string
	Header http.Header
	Body   []byte
}

// Event decodes the notification's StreamResponse.
func (n Notification) Event(t testing.TB) spec.Event {
	t.Helper()
	var sr spec.StreamResponse
	if err := json.Unmarshal(n.Body, &sr); err != nil {
		t.Fatalf("push notification to %s: not a StreamResponse: %v: %s", n.Path, err, n.Body)
	}
	return sr.Event
}

// Verify fails unless the notification's signature verifies under
// token, as a receiver checks it.
func (n Notification) Verify(t testing.TB, token string) {
	t.Helper()
	if err := a2a.VerifyPush(token, n.Header, n.Body, time.Now(), 5*time.Minute); err != nil {
		t.Fatalf("push notification to %s: %v", n.Path, err)
	}
}

// PushReceiver is an A2A client's webhook on loopback: it records every
// POST and answers each with the next status of its script, then 200.
type PushReceiver struct {
	URL string
	got chan Notification

	mu     sync.Mutex
	script []int
}

// NewPushReceiver starts a receiver whose first answers are statuses;
// it stops when the test ends.
func NewPushReceiver(t testing.TB, statuses ...int) *PushReceiver {
	r := &PushReceiver{got: make(chan Notification, 256), script: statuses}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		status := http.StatusOK
		if len(r.script) > 0 {
			status, r.script = r.script[0], r.script[1:]
		}
		r.mu.Unlock()
		r.got <- Notification{Path: req.URL.Path, Header: req.Header, Body: body}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Next returns the next notification, failing after Timeout.
func (r *PushReceiver) Next(t testing.TB) Notification {
	t.Helper()
	select {
	case n := <-r.got:
		return n
	case <-time.After(Timeout):
		t.Fatalf("no push notification within %v", Timeout)
		return Notification{}
	}
}

// None fails if a notification came and was not read.
func (r *PushReceiver) None(t testing.TB) {
	t.Helper()
	select {
	case n := <-r.got:
		t.Fatalf("an unexpected push notification to %s: %s", n.Path, n.Body)
	default:
	}
}
