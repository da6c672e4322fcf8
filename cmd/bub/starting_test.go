package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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

// TestServeStartingHandOverClosesStuckRequest: a new connection stuck in
// its first request's headers when the bus takes over is closed once the
// second the hand-over gives it has passed, not left open until
// ReadHeaderTimeout (10 s) while the bus serves.
func TestServeStartingHandOverClosesStuckRequest(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer inner.Close()
	ln := &acceptSignal{Listener: inner, accepted: make(chan struct{}, 1)}
	handOver := serveStarting(ln, nil, slog.New(slog.DiscardHandler))

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\n")
	require.NoError(t, err)
	<-ln.accepted

	handOver()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the stuck request's connection is closed at hand-over")
}

// acceptSignal tells on accepted when its Accept has returned a connection.
type acceptSignal struct {
	net.Listener
	accepted chan struct{}
}

func (a *acceptSignal) Accept() (net.Conn, error) {
	c, err := a.Listener.Accept()
	if err == nil {
		a.accepted <- struct{}{}
	}
	return c, err
}

// SetDeadline lets the hand-over wake the Accept under way.
func (a *acceptSignal) SetDeadline(t time.Time) error {
	return a.Listener.(*net.TCPListener).SetDeadline(t)
}
