package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// The core's seams for add-ons (docs/ARCHITECTURE.md): an add-on is an
// Extension in Options.Extensions; as the server starts it registers
// HTTP handlers (Handle), JSON-RPC methods (HandleMethod), observers of
// what happens to messages (Observe) and work for shutdown (OnShutdown).
// The core knows none of its add-ons: it serves what was registered.

// An Extension adds to a Server as it starts. NewContext calls each
// one's Extend in the order of Options.Extensions, once the server has
// joined its cluster and before it resumes pending work or serves
// anyone, so that what it registers is there for the first request. An
// error stops the start.
type Extension interface {
	Extend(s *Server) error
}

// ExtensionFunc is an Extension made of its Extend: for an add-on built
// as the server starts, when what it needs exists (a cluster node's
// store, once the node joined).
type ExtensionFunc func(s *Server) error

// Extend calls f(s).
func (f ExtensionFunc) Extend(s *Server) error { return f(s) }

var _ Extension = ExtensionFunc(nil)

// Handle registers h for the HTTP requests pattern matches (a
// net/http.ServeMux pattern: "/v1/events", or "/console/" for a tree).
// The core serves its own paths first: /, /healthz, /readyz and
// /metrics, which Handle refuses, as it refuses a pattern registered
// before. Handle may be called only from Extend.
func (s *Server) Handle(pattern string, h http.Handler) (err error) {
	s.mustExtend("Handle")
	switch pattern {
	case "/", "/healthz", "/readyz", "/metrics":
		return fmt.Errorf("HTTP path %q is the core's", pattern)
	}
	defer func() {
		// ServeMux says so by panicking: a conflict is an add-on's
		// error, which stops the start, not the process.
		if p := recover(); p != nil {
			err = fmt.Errorf("HTTP path %q: %v", pattern, p)
		}
	}()
	s.mux.Handle(pattern, h)
	return nil
}

// A Method is a JSON-RPC method an add-on serves on the WebSocket door.
// It runs off the connection's read loop, bounded like every queued
// request by Options.MaxInFlight, after the checks its fields ask for:
// every method needs an initialized connection.
type Method struct {
	// Admin methods need a credential with admin.
	Admin bool
	// Serve answers a call from caller with params (the request's raw
	// params, possibly empty). An error from protocol.Errorf goes to the
	// peer as it is; any other as an internal error.
	Serve func(ctx context.Context, caller *Caller, params json.RawMessage) (any, error)
}

// HandleMethod registers m as the method name. A name the core serves
// already, or one registered before, is refused. HandleMethod may be
// called only from Extend.
func (s *Server) HandleMethod(name string, m Method) error {
	s.mustExtend("HandleMethod")
	if _, ok := s.methods[name]; ok {
		return fmt.Errorf("method %q is registered already", name)
	}
	s.methods[name] = method{queued: true, admin: m.Admin, serve: func(c *conn, req *rpcstream.Request) (any, error) {
		return m.Serve(c.server.ctx, &Caller{c: c}, req.Params)
	}}
	return nil
}

// DecodeParams decodes a method's params into v as the core's methods
// do: params must be an object, and a field of the wrong type is named
// in the error (-32602).
func DecodeParams(method string, params json.RawMessage, v any) error {
	if err := paramsObject(method, params); err != nil {
		return err
	}
	return paramsError(method, json.Unmarshal(params, v))
}

// A Caller is the peer a method serves.
type Caller struct {
	c *conn
}

// ClientID is the caller's clientId.
func (c *Caller) ClientID() string {
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	return c.c.clientID
}

// Identity is who the limits count the caller against: its
// credential's name, or its clientId on an open bus. A record the
// caller makes to publish later as it does (NewPublisher) keeps both.
func (c *Caller) Identity() string {
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	return c.c.limitKeyLocked()
}

// Logger logs as the caller's connection does, with its attributes.
func (c *Caller) Logger() *slog.Logger { return c.c.log }

// CheckPublish refuses, as sendMessage would, a publish to topic the
// caller's credential does not allow, or to one of the bus's own
// topics: for a method that publishes for the caller later. The
// refusal is counted and logged.
func (c *Caller) CheckPublish(topic string) error {
	c.c.mu.Lock()
	access, identity, id := c.c.access, c.c.identity, c.c.clientID
	c.c.mu.Unlock()
	return c.c.checkPublish(access, identity, id, topic)
}

// CheckAdmin refuses method to a caller whose credential lacks admin,
// as the admin methods are (Method.Admin); on an open bus it passes.
// The refusal is counted and logged.
func (c *Caller) CheckAdmin(method string) error { return c.c.checkAdmin(method) }

// Admin reports whether the caller is an admin of a bus with auth: on
// an open bus nobody is, though CheckAdmin lets everyone pass.
func (c *Caller) Admin() bool {
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	return c.c.server.auth.Load() != nil && (c.c.access == nil || c.c.access.Admin())
}

// An Event is what happened to a message, as the core tells its
// observers: the journal's event (protocol.JournalEvent; its Time, Node
// and Cursor are the observer's to fill) and, when the core holds it
// whole (accepted, routed, woken), the message.
type Event struct {
	protocol.JournalEvent
	// Message is read-only and valid only during Observe; nil when the
	// event is not about a message the core holds whole.
	Message *store.Message
}

// An Observer hears what happens to messages on this node. Observe runs
// on the path of the message: it must not block, wait on anything the
// core holds, or keep ev.Message after it returns. ev comes by value, so
// that telling observers allocates nothing. An observer
// that cannot keep up drops events, counts what it dropped in a metric
// of its own, and never slows the message.
type Observer interface {
	Observe(ev Event)
}

// Observe adds o to the observers. Observe may be called only from
// Extend.
func (s *Server) Observe(o Observer) {
	s.mustExtend("Observe")
	s.observers = append(s.observers, o)
}

// OnShutdown registers f to run as Shutdown starts, before the drain:
// an add-on ends its streams and stops taking work there. f gets
// Shutdown's ctx. OnShutdown may be called only from Extend.
func (s *Server) OnShutdown(f func(ctx context.Context)) {
	s.mustExtend("OnShutdown")
	s.shutdownHooks = append(s.shutdownHooks, f)
}

// Options returns the options the server was made with, defaults
// applied, for an add-on to follow the bus's settings (WriteTimeout,
// MaxMessageBytes) and log with its Logger. Limits and Auth are those of the start: SetLimits and
// SetAuth change what is in force.
func (s *Server) Options() Options { return s.opts }

// mustExtend panics unless an Extend is running: what the add-ons
// register is read without a lock once the server serves, so a late
// registration would race the read loops (or, for middleware, be
// silently left out).
func (s *Server) mustExtend(what string) {
	if !s.extending {
		panic("bus: " + what + " called outside Extend: add-ons register as the server starts (Options.Extensions)")
	}
}

// extend runs opts' extensions, then puts their delivery middleware
// around the pipeline, before anything is delivered through it.
func (s *Server) extend() error {
	s.extending = true
	defer func() { s.extending = false }()
	for _, e := range s.opts.Extensions {
		if err := e.Extend(s); err != nil {
			return fmt.Errorf("extension %T: %w", e, err)
		}
	}
	s.pipe.useMiddleware()
	s.intercepted = len(s.publishHooks) > 0 || len(s.pipe.middleware) > 0
	return nil
}
