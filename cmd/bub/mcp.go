package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bub-bus/bub/bridges/mcp"
	"github.com/bub-bus/bub/peer"
)

func init() {
	register("mcp", "serve the bus to an MCP client (an assistant) over stdio, or Streamable HTTP with --listen", runMCP)
}

// mcpConfig is bub mcp's flags.
type mcpConfig struct {
	client clientFlags
	listen string
	// tokenFile holds the bearer token HTTP clients must present.
	tokenFile string
	// insecure serves --listen without a token, on loopback only.
	insecure bool
}

func runMCP(ctx context.Context, std stdio, args []string) int {
	var cfg mcpConfig
	fs := newFlagSet(std, "mcp", "mcp [--listen ADDR] [flags]\n\n"+
		"Serves the bus as an MCP server: over stdin and stdout, as a desktop assistant starts it,\n"+
		"or with --listen over Streamable HTTP at http://ADDR/, where every request must carry\n"+
		"Authorization: Bearer and the token in --listen-token-file. It connects to the bus as one identity\n"+
		"(--client-id, else $BUB_AGENT_ID, else cli- and random hex) with its credential's grants and\n"+
		"nothing more, and offers the tools send_message, wait_for_message, list_dead_letters and\n"+
		"replay_dead_letter (admin grant only), bcp_query and bcp_respond, and each topic pattern as\n"+
		"the resource bub://topic/{pattern}, whose subscribers are notified of every message.\n"+
		"What other peers wrote reaches the assistant marked as untrusted data. Logs go to stderr.\n"+
		"See docs/MCP.md.")
	cfg.client.addFlags(fs)
	cfg.client.addReconnectFlags(fs)
	fs.Lookup("client-id").Usage = "clientId to connect as, the assistant's identity on the bus (default: $BUB_AGENT_ID, else cli- and random hex); it takes over a connection with the same clientId"
	fs.StringVar(&cfg.listen, "listen", "", "serve Streamable HTTP on this address (e.g. 127.0.0.1:7893) instead of stdio; needs --listen-token-file, or --listen-insecure on loopback")
	fs.StringVar(&cfg.tokenFile, "listen-token-file", "", "file holding the token every HTTP client of --listen must present as Authorization: Bearer; surrounding white space is ignored")
	fs.BoolVar(&cfg.insecure, "listen-insecure", false, "serve --listen without a token, for development: whoever reaches the address acts as this identity; refused on an address other than loopback")
	// The server's own settings, set once in the assistant's
	// configuration: BUB_LISTEN and BUB_CLIENT_ID would be other
	// commands' (bub serve listens too).
	bindEnvAs(fs, "client-id", "BUB_MCP_CLIENT_ID")
	bindEnvAs(fs, "listen", "BUB_MCP_LISTEN")
	bindEnvAs(fs, "listen-token-file", "BUB_MCP_LISTEN_TOKEN_FILE")
	bindEnvAs(fs, "listen-insecure", "BUB_MCP_LISTEN_INSECURE")
	if code, ok := parseFlags(fs, std, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usagef(std, "mcp", "unexpected argument %q", fs.Arg(0))
	}
	if cfg.client.clientID == "" {
		cfg.client.clientID = os.Getenv("BUB_AGENT_ID")
	}
	// Checked before dialling the bus: a server that would let anyone
	// act as its identity does not start.
	token, err := cfg.listenToken()
	if err != nil {
		return usagef(std, "mcp", "%v", err)
	}

	dialCtx, cancel := context.WithTimeout(ctx, dialTimeout)
	conn, err := cfg.client.dial(dialCtx, std, peer.Options{CallTimeout: time.Minute})
	cancel()
	if err != nil {
		return errorf(std, "%v", err)
	}
	defer conn.Close()
	logger := slog.New(slog.NewTextHandler(std.err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	server := mcp.NewServer(conn, &mcp.Options{SendTimeout: answerTimeout(conn.Limits()), Logger: logger})
	// A connection that ends for good (its clientId taken over, its
	// credential revoked) ends the server: it can act as nobody.
	ctx, unbind := conn.Bind(ctx)
	defer unbind()
	if cfg.listen == "" {
		// Said on stderr, which an assistant keeps as the server's log.
		fmt.Fprintf(std.err, "bub mcp: serving MCP on stdio as %s\n", conn.ClientID())
		err = serveMCPStdio(ctx, std, server)
	} else {
		err = serveMCPHTTP(ctx, std, server, cfg.listen, token, conn.ClientID())
	}
	if conn.Err() != nil && !errors.Is(conn.Err(), peer.ErrClosed) {
		return errorf(std, "the bus connection ended: %v", endedHint(conn.Err()))
	}
	if err != nil {
		return errorf(std, "%v", err)
	}
	return 0
}

// listenToken checks the HTTP flags and returns the token HTTP clients
// must present, or "" when --listen-insecure serves without one. Errors
// name the flag and the file, never the token.
func (cfg *mcpConfig) listenToken() (string, error) {
	switch {
	case cfg.listen == "" && (cfg.tokenFile != "" || cfg.insecure):
		return "", errors.New("--listen-token-file and --listen-insecure are for --listen (BUB_MCP_LISTEN); on stdio the assistant that starts bub mcp is its only client")
	case cfg.listen == "":
		return "", nil
	case cfg.tokenFile != "" && cfg.insecure:
		return "", errors.New("give --listen-token-file or --listen-insecure, not both")
	case cfg.insecure && !isLoopback(cfg.listen):
		return "", fmt.Errorf("refusing --listen-insecure on %s, which is not a loopback address: whoever reaches it would act on the bus as this identity; give --listen-token-file instead", cfg.listen)
	case cfg.insecure:
		return "", nil
	case cfg.tokenFile == "":
		return "", fmt.Errorf("--listen %s needs --listen-token-file (or BUB_MCP_LISTEN_TOKEN_FILE), a file holding the token MCP clients must present as Authorization: Bearer; "+
			"for development on loopback only, --listen-insecure serves without one", cfg.listen)
	}
	return readSecret("", cfg.tokenFile, "", "--listen-token-file")
}

// serveMCPStdio serves one MCP session on stdin and stdout until the
// client closes stdin (its goodbye) or ctx ends.
func serveMCPStdio(ctx context.Context, std stdio, server *sdk.Server) error {
	t := &sdk.IOTransport{Reader: io.NopCloser(std.in), Writer: nopWriteCloser{std.out}}
	err := server.Run(ctx, t)
	if err == nil || ctx.Err() != nil || errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("stdio: %w", err)
}

// nopWriteCloser leaves stdout open when the transport closes, for the
// error that may follow.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// serveMCPHTTP serves Streamable HTTP on addr until ctx ends, to
// clients that present token, or to any client if token is "".
func serveMCPHTTP(ctx context.Context, std stdio, server *sdk.Server, addr, token, clientID string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", addr, err)
	}
	var handler http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil)
	if token != "" {
		handler = requireBearer(token, handler)
	}
	// A web page the user visits must not drive the bus identity from
	// the browser.
	srv := &http.Server{Handler: http.NewCrossOriginProtection().Handler(handler), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(std.err, "bub mcp: serving Streamable HTTP at http://%s/ as %s\n", ln.Addr(), clientID)
	if token == "" {
		fmt.Fprintf(std.err, "bub mcp: warning: --listen-insecure: no client is authenticated; whatever on this host reaches %s acts on the bus as %s\n", ln.Addr(), clientID)
	} else if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		fmt.Fprintf(std.err, "bub mcp: warning: %s is not a loopback address and serves plain HTTP: the bearer token crosses the network in the clear; put a TLS proxy in front\n", ln.Addr())
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Open event streams never end by themselves.
		if err := srv.Shutdown(shutdownCtx); err != nil {
			srv.Close()
		}
		return nil
	case err := <-served:
		return fmt.Errorf("serve http on %s: %w", addr, err)
	}
}

// requireBearer passes on only requests whose Authorization is a bearer
// token equal to token, and answers every other 401 with
// WWW-Authenticate: Bearer. The SDK's auth.RequireBearerToken sends
// WWW-Authenticate only with OAuth resource metadata or scopes, and
// refuses a token without an expiry, neither of which a static token
// has. Digests are compared so that the time taken says nothing of the
// token's length or content.
func requireBearer(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			challenge := `Bearer realm="bub mcp"`
			if r.Header.Get("Authorization") != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			http.Error(w, "bub mcp: missing or wrong bearer token; send Authorization: Bearer and the token of bub mcp's --listen-token-file", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
