package gateway

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/internal/buildinfo"
)

// lockedLog is a log the bus's goroutines write to while the test reads it.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestGatewayClientInfoNamesItsBuild: the bus's "client initialized" line
// names the gateway's build, as it does every other bub client's, so an
// operator can tell which gateway connected.
func TestGatewayClientInfoNamesItsBuild(t *testing.T) {
	var log lockedLog
	f := newFixtureWith(t, func(o *bus.Options) { o.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	f.gateway(nil)
	want := `client=bcp-gateway identity=bcp-gateway client_info="bub-bcp-gateway ` + buildinfo.Version() + `"`
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "client initialized") && strings.Contains(line, "client=bcp-gateway") {
			if !strings.Contains(line, want) {
				t.Fatalf("the bus logged\n%s\nwant it to say %s", line, want)
			}
			return
		}
	}
	t.Fatalf("the bus logged no initialize of bcp-gateway:\n%s", log.String())
}
