package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
)

func TestHealthcheckBus(t *testing.T) {
	t.Setenv("BUB_HEALTHCHECK_URL", "")
	srv, err := bus.New(&bus.Options{Logger: quietLogger})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	defer hs.Close()

	code, stdout, stderr := runCLI(t.Context(), "", "healthcheck", "--url", hs.URL+"/readyz")
	assert.Equal(t, 0, code, stderr)
	assert.Empty(t, stdout)
	assert.Empty(t, stderr)

	// A draining bus is alive but not ready: the probe fails and says so.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx))
	code, _, stderr = runCLI(t.Context(), "", "healthcheck", "--url", hs.URL+"/readyz")
	assert.Equal(t, 1, code)
	oneLine(t, stderr, "not ready: 503 Service Unavailable: draining")
	assert.Contains(t, stderr, hs.URL+"/readyz")

	// The URL may come from the environment, so the image's HEALTHCHECK
	// needs no arguments.
	t.Setenv("BUB_HEALTHCHECK_URL", hs.URL+"/healthz")
	code, _, stderr = runCLI(t.Context(), "", "healthcheck")
	assert.Equal(t, 0, code, stderr)
}

func TestHealthcheckFailures(t *testing.T) {
	t.Setenv("BUB_HEALTHCHECK_URL", "")
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer slow.Close()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"refused", []string{"--url", closedURL + "/readyz"}, 1, "connection refused"},
		{"timeout", []string{"--url", slow.URL + "/readyz", "--timeout", "100ms"}, 1, "no answer within 100ms"},
		{"not http", []string{"--url", "ws://127.0.0.1:7892/"}, 2, "is not an http:// or https:// URL"},
		{"argument", []string{"http://127.0.0.1:7892/readyz"}, 2, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t.Context(), "", append([]string{"healthcheck"}, tc.args...)...)
			assert.Equal(t, tc.code, code)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "stderr: %q", stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
}

func TestHealthcheckTLS(t *testing.T) {
	t.Setenv("BUB_HEALTHCHECK_URL", "")
	hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ready\n"))
	}))
	defer hs.Close()
	// The test server's certificate is self-signed: refused unless the
	// probe is told not to verify.
	code, _, stderr := runCLI(t.Context(), "", "healthcheck", "--url", hs.URL+"/readyz")
	assert.Equal(t, 1, code)
	oneLine(t, stderr, "certificate")
	code, _, stderr = runCLI(t.Context(), "", "healthcheck", "--url", hs.URL+"/readyz", "--insecure")
	assert.Equal(t, 0, code, stderr)
}
