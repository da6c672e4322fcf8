package journal

import (
	"net/http"

	"github.com/bub-bus/bub/bus"
)

// handleConsole serves the console's Messages page while the console is
// inside bus (bus.Server.AddConsolePages). Interim (issue 34): once the
// console is a package of its own, it mounts SessionEvents,
// SessionEventStream and SessionMessages itself, with its own session's
// credential, and reads On and Payloads for its session answer; this
// file goes.
func (jn *Journal) handleConsole(s *bus.Server) {
	session := s.ConsoleCredential
	s.AddConsolePages(bus.ConsolePages{
		Session: map[string]any{"journal": jn.On(), "journalPayloads": jn.Payloads()},
		API: map[string]http.Handler{
			"events":        jn.SessionEvents(session),
			"events/stream": jn.SessionEventStream(session),
			"messages":      jn.SessionMessages(session),
		},
	})
}
