package mcp

import (
	"log/slog"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bub-bus/bub/internal/buildinfo"
	"github.com/bub-bus/bub/peer"
)

// Options configure a Server. A nil *Options, or the zero value of a
// field, means the default.
type Options struct {
	// History is how many of a pattern's newest messages the server
	// keeps, for its resource and for wait_for_message. A message pushed
	// out unread is counted in the next wait_for_message's missed.
	// Default: 100.
	History int
	// MaxPatterns bounds the patterns the server watches; each is a
	// subscription on the bus for the server's life. Default: 64.
	MaxPatterns int
	// SendTimeout bounds a send_message's wait for every subscriber's
	// answer. Default: the Conn's CallTimeout.
	SendTimeout time.Duration
	// MaxWait caps the timeout_seconds of wait_for_message.
	// Default: 10 minutes.
	MaxWait time.Duration
	// Logger receives the SDK's warnings. Default: slog.Default().
	Logger *slog.Logger
}

// instructions is what the server tells an MCP client at initialize.
const instructions = `This server connects you to a bub-bus message bus as one identity, with its credential's grants and nothing more.
send_message publishes; wait_for_message returns the next message on a topic pattern (agent:<your clientId> holds your direct messages, including BCP answers);
the resources bub://topic/{pattern} keep a pattern's recent messages, and subscribing one notifies you of each new message.
` + untrustedNotice

// NewServer returns an MCP server that acts on the bus through conn, as
// conn's clientId. Run it with a transport of the SDK (sdk.StdioTransport,
// sdk.NewStreamableHTTPHandler); conn stays the caller's to close.
func NewServer(conn *peer.Conn, opts *Options) *sdk.Server {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.History <= 0 {
		o.History = 100
	}
	if o.MaxPatterns <= 0 {
		o.MaxPatterns = 64
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	t := &topics{conn: conn, history: o.History, maxWatch: o.MaxPatterns, watches: map[string]*watch{}}
	s := sdk.NewServer(&sdk.Implementation{Name: "bub", Title: "bub-bus", Version: buildinfo.Version()}, &sdk.ServerOptions{
		Instructions:       instructions,
		Logger:             o.Logger,
		SubscribeHandler:   t.subscribe,
		UnsubscribeHandler: t.unsubscribe,
	})
	t.server = s
	tl := &tools{conn: conn, topics: t, sendTimeout: o.SendTimeout, maxWait: o.MaxWait}
	tl.add(s)
	s.AddResourceTemplate(&sdk.ResourceTemplate{
		URITemplate: topicURIPrefix + "{+pattern}",
		Name:        "topic",
		Title:       "Messages on a topic pattern",
		Description: "The newest messages the bus delivered to this server on a topic pattern (exact, a prefix ending in ':' or '-', or a glob such as inbound:*), oldest first. " +
			"Reading or subscribing a pattern subscribes it on the bus, within this server's grants; a subscription is notified of each new message. " + untrustedNotice,
		MIMEType: "text/plain",
	}, t.read)
	inbox := peer.AgentTopic(conn.ClientID())
	s.AddResource(&sdk.Resource{
		URI:         topicURI(inbox),
		Name:        "inbox",
		Title:       "Direct messages to " + conn.ClientID(),
		Description: "Messages sent to this server's own clientId (" + inbox + "), BCP answers and queries among them. " + untrustedNotice,
		MIMEType:    "text/plain",
	}, t.read)
	return s
}
