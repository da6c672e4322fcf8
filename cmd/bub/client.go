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
	"github.com/bub-bus/bub/internal/redact"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// busURLUsage is the help of every command's --bus-url.
const busURLUsage = "WebSocket URL of the bus, or several nodes of a cluster comma-separated (ws://a:7892/,ws://b:7892/): the first that answers is used, and after a loss the next"

// clientFlags are the flags of every command that connects to the bus.
type clientFlags struct {
	busURL   string
	clientID string
	cred     credentialFlags
	// retryUnauthorized keeps a reconnecting command trying when the bus
	// refuses its credential (addReconnectFlags).
	retryUnauthorized bool
}

// addReconnectFlags adds the flags of a command that stays connected
// and reconnects (listen, mcp): a one-shot command never reconnects.
func (f *clientFlags) addReconnectFlags(fs *flag.FlagSet) {
	fs.BoolVar(&f.retryUnauthorized, "retry-unauthorized", false, "keep reconnecting when the bus refuses the credential (restarted with auth, a token revoked); by default the command says why and exits 1, since the same token would be refused every time")
	bindEnv(fs, "retry-unauthorized")
}

func (f *clientFlags) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.busURL, "bus-url", peer.DefaultBusURL, busURLUsage)
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
	opts.RetryUnauthorized = f.retryUnauthorized
	conn, err := peer.Dial(ctx, f.busURL, &opts)
	if err != nil {
		return nil, dialHint(err, f.busURL)
	}
	return conn, nil
}

// dialHint adds to a failed connection to the bus what to check: the
// credential when the bus refused it, whether bub serve runs when nothing
// listens. Every command that connects (the one-shot ones, the spawner,
// the gateway) reports a failed dial through it.
func dialHint(err error, busURL string) error {
	switch {
	case errors.Is(err, peer.ErrUnauthorized) || protocol.CodeOf(err) == protocol.CodeUnauthorized:
		return fmt.Errorf("%w; check --token, --token-file or BUB_TOKEN (the bus's log says why it refused)", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: nothing listens there; check that bub serve runs at %s, or point --bus-url (BUB_BUS_URL) at it", err, redact.URLs(busURL))
	}
	return err
}

// endedHint says why a reconnecting command's connection ended for
// good, and what to do about a refused credential.
func endedHint(err error) error {
	if errors.Is(err, peer.ErrRefused) {
		return fmt.Errorf("%w; check --token, --token-file or BUB_TOKEN (the bus's log says why it refused), or pass --retry-unauthorized to keep trying", err)
	}
	return err
}

// busURLs splits a --bus-url value into its URLs: a comma-separated list
// names several nodes of one bus, as peer.Dial takes it.
func busURLs(list string) []string {
	urls := strings.Split(list, ",")
	for i := range urls {
		urls[i] = strings.TrimSpace(urls[i])
	}
	return urls
}

// checkBusURL refuses a bus URL list with a URL that is not ws:// or
// wss://, naming it and suggesting the URL that was probably meant: a bare
// host:port otherwise fails deep in URL parsing with a message that names
// neither the flag nor the fix.
func checkBusURL(list string) error {
	urls := busURLs(list)
	for i, raw := range urls {
		// A URL may carry user:password, which an error must not show.
		raw = redact.URL(raw)
		where := fmt.Sprintf("bus URL %q (--bus-url or BUB_BUS_URL)", raw)
		if len(urls) > 1 {
			where = fmt.Sprintf("bus URL %d of %d (%q) in %q (--bus-url or BUB_BUS_URL)", i+1, len(urls), raw, redact.URLs(list))
		}
		if raw == "" {
			return fmt.Errorf("%s is empty", where)
		}
		if u, err := url.Parse(raw); err == nil && strings.HasSuffix(u.Host, ":") {
			// ws://127.0.0.1:/ would dial port 80.
			def, _ := url.Parse(peer.DefaultBusURL)
			u.Host += def.Port()
			return fmt.Errorf("%s has an empty port; did you mean %s?", where, u)
		}
		if fix, ok := wsURLFix(raw); !ok {
			return fmt.Errorf("%s is not a WebSocket URL; did you mean %s?", where, fix)
		}
	}
	return nil
}

// wsURLFix reports whether raw is a ws:// or wss:// URL with a host, and
// when it is not, the URL that was probably meant.
func wsURLFix(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme == "ws" || u.Scheme == "wss") && u.Host != "" {
		return "", true
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
	return scheme + hostPath, false
}

// usagef prints a one-line usage error for a subcommand and returns exit
// status 2.
func usagef(io stdio, command, format string, args ...any) int {
	fmt.Fprintf(io.err, "bub %s: %s\n", command, fmt.Sprintf(format, args...))
	return 2
}
