package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// clientFlags are the flags of every command that connects to the bus.
type clientFlags struct {
	busURL   string
	clientID string
}

func (f *clientFlags) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.busURL, "bus-url", peer.DefaultBusURL, "WebSocket URL of the bus")
	fs.StringVar(&f.clientID, "client-id", "", "clientId to connect as (default: cli- and random hex; commands that only publish use $BUB_AGENT_ID when set, without disturbing the agent's own connection)")
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
	return peer.Dial(ctx, f.busURL, &opts)
}

// usagef prints a one-line usage error for a subcommand and returns exit
// status 2.
func usagef(io stdio, command, format string, args ...any) int {
	fmt.Fprintf(io.err, "bub %s: %s\n", command, fmt.Sprintf(format, args...))
	return 2
}
