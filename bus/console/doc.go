// Package console is the bus's operator console: a few static files
// embedded in the binary and the JSON API under /console/api/ that they
// call, an add-on of a bus.Server (Extension).
//
// It takes no lock of the core: what it shows of clients, routes and
// the dead-letter queue is a copy the core makes under its own locks
// (bus.Server.Clients, Route, Status, DeadLetterQueue), what it shows of
// agents and the BCP gateway it hears as an observer of routed messages,
// and a login is checked by the core's credential checks
// (bus.Server.Authenticate). docs/OPERATIONS.md, "Operator console",
// is its manual.
package console
