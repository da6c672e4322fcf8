package journal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/bub-bus/bub/bus"
)

// A Journal is the message journal as an add-on of a bus
// (bus.Extension): it observes what the core does with each message,
// keeps the events in memory (journal.go), serves them at PathEvents and
// PathEventsStream (http.go), answers the other nodes' searches of a
// cluster's page (cluster.go), and gives the console its Messages page
// (session.go). Off, it keeps nothing and its paths answer 404, so that
// a reader is told the journal is off rather than that nothing is
// there.
type Journal struct {
	opts Options
	s    *bus.Server
	// j is nil when off.
	j *journal
	// writeTimeout bounds a stream's write (bus.Options.WriteTimeout);
	// maxAnswer bounds a node's answer to a cluster's search
	// (bus.Options.MaxMessageBytes, which a cluster's frame carries).
	writeTimeout time.Duration
	maxAnswer    int64
}

// New returns a journal configured by o (nil: the defaults), for one
// server's Options.Extensions.
func New(o *Options) *Journal {
	jn := &Journal{}
	if o != nil {
		jn.opts = *o
	}
	return jn
}

// surveyOp names the cluster's request of a node's part of a page
// (bus.Server.Survey).
const surveyOp = "journal"

// Extend makes the journal s's: it registers its observer, paths, survey
// handler and the end of its streams at shutdown.
func (jn *Journal) Extend(s *bus.Server) error {
	if jn.s != nil {
		return errors.New("journal: a Journal extends one server; make one with New for each")
	}
	jn.s = s
	o := s.Options()
	jn.writeTimeout, jn.maxAnswer = o.WriteTimeout, o.MaxMessageBytes
	jn.j = newJournal(jn.opts, s.Status().Node, s.Registry())
	if jn.j != nil {
		s.Observe(jn.j)
		s.OnShutdown(func(context.Context) { jn.j.close() })
	}
	if err := s.Handle(PathEvents, http.HandlerFunc(jn.serveEvents)); err != nil {
		return err
	}
	if err := s.Handle(PathEventsStream, http.HandlerFunc(jn.serveEventStream)); err != nil {
		return err
	}
	if err := s.OnSurvey(surveyOp, jn.answerSearch); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// On reports whether the journal keeps events (Options.Off unset).
func (jn *Journal) On() bool { return !jn.opts.Off }

// Payloads reports whether the journal keeps accepted messages'
// payloads (Options.Payloads), for a page to offer to show them.
func (jn *Journal) Payloads() bool { return !jn.opts.Off && jn.opts.Payloads }
