package outbound

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// echoServer is a plain coder/websocket server that answers every message
// with the same bytes: it checks our client frames as RFC 6455 has it
// (a client's unmasked frame fails the connection).
func echoServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ws.SetReadLimit(1 << 20)
		for {
			typ, p, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			if ws.Write(r.Context(), typ, p) != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// Messages a client writes at once, from many goroutines, of every frame
// length class, reach a standard server intact (masked as a client's must
// be) and come back; the connection closes with a handshake.
func TestDialWritesMaskedFrames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, out, _, err := Dial(ctx, echoServer(t), nil, 10*time.Second)
	require.NoError(t, err)
	ws.SetReadLimit(1 << 20)
	sizes := []int{0, 1, 7, 125, 126, 1000, 65535, 65536, 200_000}
	want := make(map[string]bool)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, n := range sizes {
		msg := fmt.Sprintf("%d:", i) + strings.Repeat(string(rune('a'+i)), n)
		mu.Lock()
		want[msg] = true
		mu.Unlock()
		wg.Go(func() { require.NoError(t, out.WriteMessage(websocket.MessageText, []byte(msg))) })
	}
	wg.Wait()
	for range sizes {
		_, p, err := ws.Read(ctx)
		require.NoError(t, err)
		require.True(t, want[string(p)], "echoed %.20q… was not sent", p)
		delete(want, string(p))
	}
	require.Empty(t, want)
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, "done"))
}

// Masking is the XOR of RFC 6455 section 5.3 at every length and offset.
func TestAppendMasked(t *testing.T) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	for n := range 40 {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i * 7)
		}
		got := appendMasked([]byte("head"), p, key)
		require.Equal(t, "head", string(got[:4]))
		for i, b := range got[4:] {
			require.Equal(t, p[i]^key[i%4], b, "byte %d of %d", i, n)
		}
	}
}

// Over wss://, the TLS settings of the caller's HTTP client are kept and
// the Conn writes whole frames inside TLS, which the server reads as such.
func TestDialTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for {
			typ, p, err := ws.Read(r.Context())
			if err != nil || ws.Write(r.Context(), typ, p) != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "wss" + strings.TrimPrefix(srv.URL, "https")
	ws, out, _, err := Dial(ctx, url, &websocket.DialOptions{HTTPClient: srv.Client()}, 10*time.Second)
	require.NoError(t, err)
	for _, msg := range []string{"one", strings.Repeat("z", 20_000)} {
		require.NoError(t, out.WriteMessage(websocket.MessageText, []byte(msg)))
		_, p, err := ws.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, msg, string(p))
	}
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, "done"))

	// A client that does not trust the server's certificate fails.
	_, _, _, err = Dial(ctx, url, nil, 10*time.Second)
	require.Error(t, err)
}
