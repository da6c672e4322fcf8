package bustest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/protocol"
)

// Post posts body to url with header and returns the answer's status,
// header and body; it fails the test when there is no answer within
// LongTimeout.
func Post(t testing.TB, url, body string, header map[string]string) (int, http.Header, []byte) {
	t.Helper()
	a := Do(t, http.MethodPost, url, body, header)
	return a.Status, a.Header, a.Body
}

// An Answer is an HTTP answer, read whole.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// ErrorCode is the JSON-RPC code of an error answer, 0 for another.
func (a Answer) ErrorCode() int64 {
	var e struct {
		Error *protocol.Error `json:"error"`
	}
	if json.Unmarshal(a.Body, &e) != nil || e.Error == nil {
		return 0
	}
	return e.Error.Code
}

// MessageID is the messageId of a 201.
func (a Answer) MessageID(t testing.TB) string {
	t.Helper()
	var r struct {
		MessageID string `json:"messageId"`
	}
	if err := json.Unmarshal(a.Body, &r); err != nil || r.MessageID == "" {
		t.Fatalf("bustest: answer %d %s has no messageId (%v)", a.Status, a.Body, err)
	}
	return r.MessageID
}

// Do sends a method request with body to url with header and returns
// the answer; it fails the test when there is no answer within
// LongTimeout.
func Do(t testing.TB, method, url, body string, header map[string]string) Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), LongTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("bustest: %s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("bustest: %s %s: read answer: %v", method, url, err)
	}
	return Answer{Status: res.StatusCode, Header: res.Header, Body: b}
}

// Metric returns the value of the counter or gauge name in reg, of the
// series whose first label is label ("" for the first series), or -1
// when there is none.
func Metric(t testing.TB, reg prometheus.Gatherer, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("bustest: gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
