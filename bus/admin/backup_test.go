package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/admin"
	"github.com/bub-bus/bub/bus/store"
)

// TestBackupEndpointOpenBus: with no auth configured, the copy is served
// to loopback only, never to a browser, and only for GET.
func TestBackupEndpointOpenBus(t *testing.T) {
	st, err := store.Open(t.TempDir(), nil)
	require.NoError(t, err)
	defer st.Close()
	srv, err := bus.New(&bus.Options{Store: st, Logger: backupQuietLogger, Extensions: []bus.Extension{admin.Extension{}}})
	require.NoError(t, err)
	defer srv.Shutdown(t.Context())

	get := func(remote string, mutate func(*http.Request)) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7892"+admin.BackupPath, nil)
		r.RemoteAddr = remote
		r = r.WithContext(localAddrContext(r, "127.0.0.1:7892"))
		if mutate != nil {
			mutate(r)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	ok := get("127.0.0.1:50000", nil)
	assert.Equal(t, http.StatusOK, ok.Code, ok.Body.String())
	assert.Equal(t, ok.Header().Get("Content-Length"), strconv.Itoa(ok.Body.Len()))
	assert.Positive(t, ok.Body.Len())

	far := get("192.0.2.7:50000", nil)
	assert.Equal(t, http.StatusForbidden, far.Code)
	assert.Contains(t, far.Body.String(), "loopback only")

	browser := get("127.0.0.1:50000", func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") })
	assert.Equal(t, http.StatusForbidden, browser.Code)

	// DNS rebinding: loopback, but the Host is somebody else's name.
	rebound := get("127.0.0.1:50000", func(r *http.Request) { r.Host = "evil.example:7892" })
	assert.Equal(t, http.StatusForbidden, rebound.Code)

	post := get("127.0.0.1:50000", func(r *http.Request) { r.Method = http.MethodPost })
	assert.Equal(t, http.StatusMethodNotAllowed, post.Code)
}

// TestBackupEndpointMemoryStore: a bus without a file says so.
func TestBackupEndpointMemoryStore(t *testing.T) {
	srv, err := bus.New(&bus.Options{Logger: backupQuietLogger, Extensions: []bus.Extension{admin.Extension{}}})
	require.NoError(t, err)
	defer srv.Shutdown(t.Context())
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7892"+admin.BackupPath, nil)
	r.RemoteAddr = "127.0.0.1:50000"
	r = r.WithContext(localAddrContext(r, "127.0.0.1:7892"))
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, r)
	assert.Equal(t, http.StatusNotImplemented, w.Code)
	assert.Contains(t, w.Body.String(), "in memory")
}

var backupQuietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// localAddrContext gives r the local address net/http records for a
// request it accepted, which the Host check compares against.
func localAddrContext(r *http.Request, addr string) context.Context {
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		panic(err)
	}
	return context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(tcp))
}
