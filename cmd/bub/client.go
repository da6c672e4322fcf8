package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// clientFlags are the flags of every command that connects to the bus.
type clientFlags struct {
	busURL   string
	clientID string
	cred     credentialFlags
}

func (f *clientFlags) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.busURL, "bus-url", peer.DefaultBusURL, "WebSocket URL of the bus")
	fs.StringVar(&f.clientID, "client-id", "", "clientId to connect as (default: cli- and random hex; commands that only publish use $BUB_AGENT_ID when set, without disturbing the agent's own connection)")
	// Where the bus is, a deployment sets once; the clientId is this
	// invocation's own, and BUB_AGENT_ID already covers the agent case.
	bindEnv(fs, "bus-url")
	f.cred.addFlags(fs)
}

// dial connects to the bus. Logs go to stderr, so that stdout carries only
// the command's output. A publish-only command run by an agent publishes
// as that agent ($BUB_AGENT_ID); a publish-only connection does not take
// the agent's own connection over.
func (f *clientFlags) dial(ctx context.Context, io stdio, opts peer.Options) (*peer.Conn, error) {
	opts.ClientID = f.clientID
	if opts.ClientID == "" && opts.PublishOnly {
		opts.ClientID = os.Getenv("BUB_AGENT_ID")
	}
	if opts.ClientID == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		opts.ClientID = "cli-" + hex.EncodeToString(b)
	}
	opts.ClientInfo = &protocol.ClientInfo{Name: "bub", Version: buildinfo.Version()}
	opts.Logger = slog.New(slog.NewTextHandler(io.err, nil))
	if err := checkBusURL(f.busURL); err != nil {
		return nil, err
	}
	token, err := f.cred.resolve()
	if err != nil {
		return nil, err
	}
	opts.Token = token
	conn, err := peer.Dial(ctx, f.busURL, &opts)
	if errors.Is(err, peer.ErrUnauthorized) || protocol.CodeOf(err) == protocol.CodeUnauthorized {
		return nil, fmt.Errorf("%w; check --token, --token-file or BUB_TOKEN (the bus's log says why it refused)", err)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%w: nothing listens there; check that bub serve runs at %s, or point --bus-url (BUB_BUS_URL) at it", err, f.busURL)
	}
	return conn, err
}

// checkBusURL refuses a bus URL that is not ws:// or wss://, suggesting
// the URL that was probably meant: a bare host:port otherwise fails deep
// in URL parsing with a message that names neither the flag nor the fix.
func checkBusURL(raw string) error {
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme == "ws" || u.Scheme == "wss") && u.Host != "" {
		return nil
	}
	hostPath := raw
	if i := strings.Index(raw, "://"); i >= 0 {
		hostPath = raw[i+3:]
	}
	if !strings.Contains(hostPath, "/") {
		hostPath += "/"
	}
	scheme := "ws://"
	if strings.HasPrefix(raw, "https://") {
		scheme = "wss://"
	}
	return fmt.Errorf("bus URL %q (--bus-url or BUB_BUS_URL) is not a WebSocket URL; did you mean %s%s?", raw, scheme, hostPath)
}

// usagef prints a one-line usage error for a subcommand and returns exit
// status 2.
func usagef(io stdio, command, format string, args ...any) int {
	fmt.Fprintf(io.err, "bub %s: %s\n", command, fmt.Sprintf(format, args...))
	return 2
}
