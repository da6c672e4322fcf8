package gateway

import (
	"context"
	"log/slog"
	"testing"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/internal/buildinfo"
)

// initializes is a slog handler that passes on the client_info of each
// client the bus logs as initialized, keyed by its clientId.
type initializes chan [2]string

func (h initializes) Enabled(context.Context, slog.Level) bool { return true }
func (h initializes) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h initializes) WithGroup(string) slog.Handler            { return h }

func (h initializes) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "client initialized" {
		return nil
	}
	var client, info string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "client":
			client = a.Value.String()
		case "client_info":
			info = a.Value.String()
		}
		return true
	})
	select {
	case h <- [2]string{client, info}:
	default:
	}
	return nil
}

// TestGatewayClientInfoNamesItsBuild: the bus's "client initialized" line
// names the gateway's build, as it does every other bub client's, so an
// operator can tell which gateway connected.
func TestGatewayClientInfoNamesItsBuild(t *testing.T) {
	seen := make(initializes, 16)
	f := newFixtureWith(t, func(o *bus.Options) { o.Logger = slog.New(seen) })
	f.gateway(nil)
	want := "bub-bcp-gateway " + buildinfo.Version()
	for {
		select {
		case got := <-seen:
			if got[0] != "bcp-gateway" {
				continue
			}
			if got[1] != want {
				t.Fatalf("the bus logged client_info %q for the gateway, want %q", got[1], want)
			}
			return
		default:
			t.Fatal("the bus logged no initialize of bcp-gateway before the gateway started")
		}
	}
}
