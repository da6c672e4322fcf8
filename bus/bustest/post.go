package bustest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Post posts body to url with header and returns the answer's status,
// header and body; it fails the test when there is no answer within
// LongTimeout.
func Post(t testing.TB, url, body string, header map[string]string) (int, http.Header, []byte) {
	t.Helper()
	return Do(t, http.MethodPost, url, body, header)
}

// Do sends a method request with body to url with header and returns
// the answer's status, header and body; it fails the test when there
// is no answer within LongTimeout.
func Do(t testing.TB, method, url, body string, header map[string]string) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), LongTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
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
	return res.StatusCode, res.Header, b
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
