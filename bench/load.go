package main

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// stats is what one run measured.
type stats struct {
	// Messages is the number of messages completed in the measured window.
	Messages int64 `json:"messages"`
	// Errors counts completions that reported a failure.
	Errors int64 `json:"errors"`
	// Throughput is completed messages per second.
	Throughput float64 `json:"msgs_per_sec"`
	// Deliveries is acked deliveries per second: Throughput × subscribers.
	Deliveries float64 `json:"deliveries_per_sec"`
	// Latency percentiles in microseconds, from when a message was sent
	// (closed loop) or was due to be sent (open loop) to when every ack
	// was back.
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Max  float64 `json:"max_us"`
	// ServerCPU is the server process's CPU time per second of the run,
	// in cores.
	ServerCPU float64 `json:"server_cpu_cores"`
	// ServerCPUPerMsg is the server process's CPU time (utime+stime from
	// /proc/PID/stat) over the whole run, warm-up and drain included,
	// divided by the messages completed in it, in microseconds. Unlike
	// a rate it hardly moves when other work on the box steals cycles.
	ServerCPUPerMsg float64 `json:"server_cpu_us_per_msg"`
	// ServerSyscallsPerMsg is the server process's read and write system
	// calls (syscr+syscw from /proc/PID/io, which count the socket reads
	// and writes) over the whole run, divided by the messages completed
	// in it: what batching saves, untouched by a busy machine.
	ServerSyscallsPerMsg float64 `json:"server_syscalls_per_msg"`
	// ClientCPUPerMsg is the same for this process, which runs every
	// client: what the publisher and subscribers spent per message.
	ClientCPUPerMsg float64 `json:"client_cpu_us_per_msg"`
	// HelperCPUPerMsg is the same for a third process the scenario runs,
	// when it has one: the spawner in the spawn scenario.
	HelperCPUPerMsg float64 `json:"helper_cpu_us_per_msg,omitempty"`
	// Lost counts messages still unanswered when the run gave up on them.
	Lost int64 `json:"lost,omitempty"`
}

// ringSize bounds the messages one run may have outstanding.
const ringSize = 1 << 20

// tracker times messages from send (or due time) to completion.
type tracker struct {
	starts    []int64 // by id % ringSize, unix nanoseconds
	measureAt int64   // completions of messages sent before this are not counted
	stopAt    int64   // nor of messages sent after this

	mu       sync.Mutex
	hist     *hdrhistogram.Histogram
	count    int64
	errors   int64
	finished atomic.Int64 // every completion, measured or not
	onDone   func()       // closed loop: frees a window slot
}

func newTracker() *tracker {
	return &tracker{starts: make([]int64, ringSize), hist: hdrhistogram.New(1, 120_000_000, 3), measureAt: 1 << 62, stopAt: 1 << 62}
}

func (t *tracker) started(id uint64, at int64) {
	atomic.StoreInt64(&t.starts[id%ringSize], at)
}

func (t *tracker) done(id uint64, failed bool) {
	now := time.Now().UnixNano()
	start := atomic.LoadInt64(&t.starts[id%ringSize])
	measureAt, stopAt := atomic.LoadInt64(&t.measureAt), atomic.LoadInt64(&t.stopAt)
	if start >= measureAt && start < stopAt {
		t.record((now-start)/1000, failed)
	}
	t.finished.Add(1)
	if t.onDone != nil {
		t.onDone()
	}
}

// record counts one measured completion that took us microseconds.
func (t *tracker) record(us int64, failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_ = t.hist.RecordValue(max(us, 1))
	t.count++
	if failed {
		t.errors++
	}
}

func (t *tracker) stats(window time.Duration, subs int) stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	secs := window.Seconds()
	return stats{
		Messages:   t.count,
		Errors:     t.errors,
		Throughput: float64(t.count) / secs,
		Deliveries: float64(t.count) * float64(subs) / secs,
		P50:        float64(t.hist.ValueAtQuantile(50)),
		P99:        float64(t.hist.ValueAtQuantile(99)),
		P999:       float64(t.hist.ValueAtQuantile(99.9)),
		Max:        float64(t.hist.Max()),
	}
}

// session is a publisher and its subscribers, kept open across runs; each
// run times its messages with a tracker of its own.
type session struct {
	sys     system
	subs    int
	pub     publisher
	current atomic.Pointer[tracker]
	nextID  uint64
}

func openSession(sys system, subs, size int) (*session, error) {
	s := &session{sys: sys, subs: subs}
	pub, err := sys.open(subs, makePayload(size), func(id uint64, failed bool) {
		if t := s.current.Load(); t != nil {
			t.done(id, failed)
		}
	})
	if err != nil {
		return nil, err
	}
	s.pub = pub
	return s, nil
}

func (s *session) close() { s.pub.close() }

// drainTimeout is how long a run waits for its last answers.
const drainTimeout = 10 * time.Second

// closedLoop keeps window messages in flight for warmup+dur and measures
// the messages sent during dur.
func closedLoop(ss *session, window int, warmup, dur time.Duration) (stats, error) {
	return windowLoop(ss, window, warmup, dur, 0)
}

// countedLoop sends exactly n messages, window at a time, giving up after
// limit, and measures all of them: its throughput is the messages answered
// over the time from the first send to the last answer.
func countedLoop(ss *session, window int, n int64, limit time.Duration) (stats, error) {
	s, err := windowLoop(ss, window, 0, limit, n)
	if err == nil && s.Messages < n {
		err = fmt.Errorf("%s: %d of %d messages answered within %s", ss.sys.name(), s.Messages, n, limit)
	}
	return s, err
}

// windowLoop keeps window messages in flight for warmup+dur, or until it
// has sent n when n > 0, and measures those sent after warmup.
func windowLoop(ss *session, window int, warmup, dur time.Duration, n int64) (stats, error) {
	sys := ss.sys
	t := newTracker()
	slots := make(chan struct{}, window)
	t.onDone = func() {
		select {
		case <-slots:
		default: // a straggler from an earlier run
		}
	}
	ss.current.Store(t)
	defer ss.current.Store(nil)
	mark := ss.cpuMark()
	start := time.Now()
	atomic.StoreInt64(&t.measureAt, start.Add(warmup).UnixNano())
	atomic.StoreInt64(&t.stopAt, start.Add(warmup+dur).UnixNano())
	end := start.Add(warmup + dur)
	var sent int64
	for n == 0 || sent < n {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		select {
		case slots <- struct{}{}:
		default:
			select {
			case slots <- struct{}{}:
			case <-time.After(drainTimeout):
				return stats{}, fmt.Errorf("%s: no answer for %s with %d in flight", sys.name(), drainTimeout, window)
			}
		}
		if err := ss.send(t, time.Now()); err != nil {
			return stats{}, err
		}
		sent++
	}
	if n > 0 {
		dur = 0 // the window is the whole run
	}
	return ss.finish(t, sent, start, mark, dur), nil
}

// openLoop sends at a constant rate for warmup+dur, whether or not answers
// keep up, and times each message from when it was due, so queueing shows
// in the latencies instead of slowing the sender (no coordinated
// omission).
func openLoop(ss *session, rate float64, warmup, dur time.Duration) (stats, error) {
	sys := ss.sys
	t := newTracker()
	ss.current.Store(t)
	defer ss.current.Store(nil)
	period := time.Duration(float64(time.Second) / rate)
	mark := ss.cpuMark()
	start := time.Now()
	atomic.StoreInt64(&t.measureAt, start.Add(warmup).UnixNano())
	atomic.StoreInt64(&t.stopAt, start.Add(warmup+dur).UnixNano())
	end := start.Add(warmup + dur)
	var sent int64
	for i := int64(0); ; i++ {
		due := start.Add(time.Duration(i) * period)
		if !due.Before(end) {
			break
		}
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		if sent-t.finished.Load() >= ringSize/2 {
			return stats{}, fmt.Errorf("%s: more than %d messages outstanding at %.0f/s", sys.name(), ringSize/2, rate)
		}
		if err := ss.send(t, due); err != nil {
			return stats{}, err
		}
		sent++
	}
	return ss.finish(t, sent, start, mark, dur), nil
}

// send sends the next message, timed from at.
func (ss *session) send(t *tracker, at time.Time) error {
	ss.nextID++
	t.started(ss.nextID, at.UnixNano())
	if err := ss.pub.send(ss.nextID); err != nil {
		return fmt.Errorf("%s: send: %w", ss.sys.name(), err)
	}
	return nil
}

// cpuMark is the CPU time the server's processes and this process had
// used when a run started, and the server's read and write calls.
type cpuMark struct {
	server, client time.Duration
	serverSyscalls int64
}

func (ss *session) cpuMark() cpuMark {
	var m cpuMark
	for _, p := range serverProcs(ss.sys) {
		t, _ := p.cpuTime()
		m.server += t
		m.serverSyscalls += syscallsOf(p.pid())
	}
	m.client, _ = cpuTimeOf(os.Getpid(), "the harness")
	return m
}

// finish waits for a run's last answers and returns its stats, over a
// measured window of dur, or of the whole run when dur is 0.
func (ss *session) finish(t *tracker, sent int64, start time.Time, mark cpuMark, dur time.Duration) stats {
	lost := waitFinished(t, sent)
	elapsed := time.Since(start)
	now := ss.cpuMark()
	if dur == 0 {
		dur = elapsed
	}
	s := t.stats(dur, ss.subs)
	s.ServerCPU = (now.server - mark.server).Seconds() / elapsed.Seconds()
	if answered := sent - lost; answered > 0 {
		s.ServerCPUPerMsg = float64((now.server - mark.server).Microseconds()) / float64(answered)
		s.ClientCPUPerMsg = float64((now.client - mark.client).Microseconds()) / float64(answered)
		s.ServerSyscallsPerMsg = float64(now.serverSyscalls-mark.serverSyscalls) / float64(answered)
	}
	s.Lost = lost
	return s
}

// waitFinished waits until sent messages are answered, or drainTimeout
// passes; it returns how many were not.
func waitFinished(t *tracker, sent int64) int64 {
	deadline := time.Now().Add(drainTimeout)
	for t.finished.Load() < sent && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return sent - t.finished.Load()
}
