package cluster

import (
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// serverLog passes the embedded server's log to slog. Its notices are
// chatty (a banner per start) and go to Debug; Fatalf goes to Error,
// because the embedded server must never exit the bus's process, and
// to fatal, where Start learns that a listener could not bind. Failed
// route connections go to routes, which summarizes them.
type serverLog struct {
	log    *slog.Logger
	routes *routeLog
	// fatal receives the first fatal message; later ones are logged only.
	fatal chan string
}

func newServerLog(log *slog.Logger, routes []*url.URL) *serverLog {
	return &serverLog{
		log:    log,
		routes: newRouteLog(log, routes),
		fatal:  make(chan string, 1),
	}
}

func (l *serverLog) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLog) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }

func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	select {
	case l.fatal <- msg:
	default:
	}
}

func (l *serverLog) Errorf(format string, v ...any) {
	if format == routeConnectError && len(v) == 2 {
		l.routes.failed(fmt.Sprint(v[1]))
		return
	}
	l.log.Error(fmt.Sprintf(format, v...))
}

var _ server.Logger = (*serverLog)(nil)

// routeConnectError is the format nats-server logs a failed route
// connection with (server/route.go, connectToRoute): once per attempt
// and pooled connection, about four lines a second for each node that
// is down.
const routeConnectError = "Error trying to connect to route (attempt %v): %v"

// Timings of routeLog.
const (
	// routeSummaryEvery is how often a route that stays unreachable is
	// reported again.
	routeSummaryEvery = 30 * time.Second
	// routeOutageGap is how long without a failure ends an outage:
	// nats-server tries a route about every second while it is down, so
	// a longer silence means it connected (or stopped trying), and the
	// next failure is a new outage, reported at once.
	routeOutageGap = 5 * time.Second
)

// routeLog summarizes failed route connections, per route: the first
// failure of an outage is logged at once, then one line every
// routeSummaryEvery saying for how long the route has been unreachable,
// instead of nats-server's line per attempt.
type routeLog struct {
	log    *slog.Logger
	routes []*url.URL

	// mu guards down.
	mu sync.Mutex
	// down are the routes failing now or lately, by target.
	down map[string]*outage
}

// outage is one route's run of failed connections.
type outage struct {
	name        string
	since, last time.Time
	reported    time.Time
	attempts    int
}

func newRouteLog(log *slog.Logger, routes []*url.URL) *routeLog {
	return &routeLog{log: log, routes: routes, down: make(map[string]*outage)}
}

// failed records one failed attempt, err being the connection's error as
// nats-server gives it, and logs what is due.
func (r *routeLog) failed(err string) {
	target := dialTarget(err)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.down[target]
	if o == nil || now.Sub(o.last) > routeOutageGap {
		r.down[target] = &outage{name: r.name(target), since: now, last: now, reported: now, attempts: 1}
		r.log.Warn(fmt.Sprintf("route to %s unreachable; NATS keeps trying (said again every %v while it lasts)", r.name(target), routeSummaryEvery), "err", err)
		return
	}
	o.attempts++
	o.last = now
	if now.Sub(o.reported) >= routeSummaryEvery {
		o.reported = now
		r.log.Warn(fmt.Sprintf("route to %s unreachable for %v", o.name, now.Sub(o.since).Round(time.Second)),
			"attempts", o.attempts, "err", err)
	}
}

// unreachable returns the routes that failed lately, by name, sorted.
func (r *routeLog) unreachable() []string {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for _, o := range r.down {
		if now.Sub(o.last) <= routeOutageGap {
			names = append(names, o.name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// name names a target as the configuration does where it can: the
// route's URL when the target is its host:port or its host name (a
// failed lookup), else the address dialled.
func (r *routeLog) name(target string) string {
	for _, u := range r.routes {
		if target == u.Host || target == u.Hostname() {
			return u.Redacted()
		}
	}
	return target
}

// dialTargetPattern finds what a connection error was about: the
// address of "dial tcp 10.0.0.3:6222: connect: connection refused", or
// the host of "lookup b2 on 127.0.0.11:53: no such host".
var dialTargetPattern = regexp.MustCompile(`dial tcp (\S+?): |lookup (\S+) `)

// dialTarget returns the address or host err names, or "a route" when it
// names none.
func dialTarget(err string) string {
	m := dialTargetPattern.FindStringSubmatch(err)
	switch {
	case m == nil:
		return "a route"
	case m[1] != "":
		return m[1]
	}
	return strings.TrimSuffix(m[2], ":")
}
