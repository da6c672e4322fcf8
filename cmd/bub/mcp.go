package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
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
}

func runMCP(ctx context.Context, std stdio, args []string) int {
	var cfg mcpConfig
	fs := newFlagSet(std, "mcp", "mcp [--listen ADDR] [flags]\n\n"+
		"Serves the bus as an MCP server: over stdin and stdout, as a desktop assistant starts it,\n"+
		"or with --listen over Streamable HTTP at http://ADDR/. It connects to the bus as one identity\n"+
		"(--client-id, else $BUB_AGENT_ID, else cli- and random hex) with its credential's grants and\n"+
		"nothing more, and offers the tools send_message, wait_for_message, list_dead_letters and\n"+
		"replay_dead_letter (admin grant only), bcp_query and bcp_respond, and each topic pattern as\n"+
		"the resource bub://topic/{pattern}, whose subscribers are notified of every message.\n"+
		"What other peers wrote reaches the assistant marked as untrusted data. Logs go to stderr.\n"+
		"See docs/MCP.md.")
	cfg.client.addFlags(fs)
	fs.Lookup("client-id").Usage = "clientId to connect as, the assistant's identity on the bus (default: $BUB_AGENT_ID, else cli- and random hex); it takes over a connection with the same clientId"
	fs.StringVar(&cfg.listen, "listen", "", "serve Streamable HTTP on this address (e.g. 127.0.0.1:7893) instead of stdio; whoever reaches it acts as this identity, so keep it on loopback or behind an authenticating proxy")
	// The server's own settings, set once in the assistant's
	// configuration: BUB_LISTEN and BUB_CLIENT_ID would be other
	// commands' (bub serve listens too).
	bindEnvAs(fs, "client-id", "BUB_MCP_CLIENT_ID")
	bindEnvAs(fs, "listen", "BUB_MCP_LISTEN")
	if code, ok := parseFlags(fs, std, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usagef(std, "mcp", "unexpected argument %q", fs.Arg(0))
	}
	if cfg.client.clientID == "" {
		cfg.client.clientID = os.Getenv("BUB_AGENT_ID")
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
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-conn.Done():
			stop()
		case <-ctx.Done():
		}
	}()
	if cfg.listen == "" {
		// Said on stderr, which an assistant keeps as the server's log.
		fmt.Fprintf(std.err, "bub mcp: serving MCP on stdio as %s\n", conn.ClientID())
		err = serveMCPStdio(ctx, std, server)
	} else {
		err = serveMCPHTTP(ctx, std, server, cfg.listen, conn.ClientID())
	}
	if conn.Err() != nil && !errors.Is(conn.Err(), peer.ErrClosed) {
		return errorf(std, "the bus connection ended: %v", conn.Err())
	}
	if err != nil {
		return errorf(std, "%v", err)
	}
	return 0
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

// serveMCPHTTP serves Streamable HTTP on addr until ctx ends.
func serveMCPHTTP(ctx context.Context, std stdio, server *sdk.Server, addr, clientID string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", addr, err)
	}
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil)
	// A web page the user visits must not drive the bus identity from
	// the browser.
	srv := &http.Server{Handler: http.NewCrossOriginProtection().Handler(handler), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(std.err, "bub mcp: serving Streamable HTTP at http://%s/ as %s\n", ln.Addr(), clientID)
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		fmt.Fprintf(std.err, "bub mcp: warning: %s is not a loopback address, and bub mcp authenticates no client: whoever reaches it acts on the bus as %s\n", ln.Addr(), clientID)
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
