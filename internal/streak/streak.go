// Package streak logs a run of like events (connections refused under one
// limit, messages an absent approver misses) in lines that do not grow
// with the run: the first event at once, then one summary per period
// while events go on. A flood of events cannot flood the log, and the
// summary still says how many there were.
package streak

import (
	"sync"
	"time"
)

// Summary is what a run's periodic line reports.
type Summary struct {
	// Events counts the events since the run's previous line.
	Events int
	// Total counts the events of the whole run, the first included.
	Total int
	// Since is when the run began.
	Since time.Time
}

// Log follows the runs of events by key. Make one with New.
type Log struct {
	every   time.Duration
	summary func(key string, s Summary)

	// mu guards runs and stopped.
	mu      sync.Mutex
	runs    map[string]*run
	stopped bool
}

type run struct {
	since         time.Time
	events, total int
	timer         *time.Timer
}

// New returns a Log that calls summary for each run still going on every
// period after its first event, with the events counted since the line
// before. A period without events ends a run.
func New(every time.Duration, summary func(key string, s Summary)) *Log {
	return &Log{every: every, summary: summary, runs: make(map[string]*run)}
}

// Add records an event under key and reports whether it began a run: the
// caller logs that event itself, with what it knows of it. Later events
// of the run are counted into its next summary. After Stop, every event
// begins a run, so that nothing is hidden.
func (l *Log) Add(key string) (first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return true
	}
	if r := l.runs[key]; r != nil {
		r.events++
		r.total++
		return false
	}
	r := &run{since: time.Now(), total: 1}
	l.runs[key] = r
	r.timer = time.AfterFunc(l.every, func() { l.tick(key, r) })
	return true
}

// tick ends r's period: a summary if it had events, else the end of the
// run.
func (l *Log) tick(key string, r *run) {
	l.mu.Lock()
	if l.runs[key] != r {
		l.mu.Unlock()
		return
	}
	if r.events == 0 {
		delete(l.runs, key)
		l.mu.Unlock()
		return
	}
	s := Summary{Events: r.events, Total: r.total, Since: r.since}
	r.events = 0
	r.timer.Reset(l.every)
	l.mu.Unlock()
	l.summary(key, s)
}

// Stop ends every run, calling summary at once for those with events not
// yet reported, and stops the timers.
func (l *Log) Stop() {
	l.mu.Lock()
	l.stopped = true
	runs := l.runs
	l.runs = nil
	l.mu.Unlock()
	for key, r := range runs {
		r.timer.Stop()
		if r.events > 0 {
			l.summary(key, Summary{Events: r.events, Total: r.total, Since: r.since})
		}
	}
}
