package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeStartingHandsOver: while the bus starts, its address answers
// /healthz and a 503 "starting" /readyz; once handed over, the same
// listener, never closed, serves the bus, to a client that kept its
// connection from before (a health probe does).
func TestServeStartingHandsOver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}

	handOver := serveStarting(ln, nil, slog.New(slog.DiscardHandler))
	for path, want := range map[string]struct {
		code int
		body string
	}{
		"/healthz": {http.StatusOK, "ok"},
		"/readyz":  {http.StatusServiceUnavailable, "starting"},
		"/metrics": {http.StatusServiceUnavailable, "bub-bus: starting; not serving yet"},
	} {
		code, body := get(path)
		assert.Equal(t, want.code, code, path)
		assert.Equal(t, want.body, body, path)
	}
	handOver()

	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ready") })}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	defer func() {
		require.NoError(t, hs.Close())
		<-served
	}()
	code, body := get("/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ready", body)
}
