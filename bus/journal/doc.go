// Package journal is the bus's message journal, an add-on of package
// bus: it observes what the core does with each message this node
// handles (accepted, routed, delivered, retried, held, dead-lettered,
// replayed, purged), keeps the events in memory, bounded by age and
// bytes, and serves them at GET /v1/events and /v1/events/stream
// (docs/PROTOCOL.md, "Message journal"), to bub trace and bub tail, and
// to the console's Messages page. On a cluster a page is the whole
// cluster's: the node asked surveys the others (bus.Server.Survey).
//
// cmd/bub serve wires it:
//
//	j := journal.New(&journal.Options{MaxAge: time.Hour})
//	srv, err := bus.New(&bus.Options{Extensions: []bus.Extension{j}})
//
// A Journal extends one server; a bus built without one has no
// /v1/events.
package journal
