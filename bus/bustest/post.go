package bustest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Post posts body to url with header and returns the answer's status,
// header and body; it fails the test when there is no answer within
// LongTimeout.
func Post(t testing.TB, url, body string, header map[string]string) (int, http.Header, []byte) {
	t.Helper()
	return Do(t, "POST", url, body, header)
}

// Do is Post with another method.
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
