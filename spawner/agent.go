package spawner

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// agent is one run of an agent process. A restart is a new agent with the
// same id. Its mutable fields are guarded by Spawner.mu.
type agent struct {
	id   string
	slot *slot
	// exited is closed once the process has been reaped (or failed to
	// start) and the agent is no longer counted.
	exited chan struct{}

	// Guarded by Spawner.mu:

	workspace string
	proc      *os.Process // nil until started
	started   time.Time
	// patterns are the agent's regular subscriptions as the bus reported
	// them, cleared by a disconnect.
	patterns []*protocol.Pattern
	// lastSubscribed is the bus's time of the newest subscribed event
	// applied, so a disconnect of an older connection, reported late, does
	// not wipe the subscriptions of the newer one.
	lastSubscribed time.Time
	// changed is closed and replaced whenever patterns change, waking
	// handlers that wait for a subscription.
	changed chan struct{}
	// ready is set once the agent subscribed to a pattern matching its
	// slot's topic; it never goes back.
	ready bool
	// stopping says the spawner itself stopped the agent (shutdown,
	// hibernation or spawn timeout), so its exit is no crash to restart
	// after.
	stopping bool
	// failure is why the spawn failed, set before the agent is stopped.
	failure error
	// watchdog stops the agent if it is not ready in time.
	watchdog *time.Timer

	// reserved is when the agent was counted; readyAt when it became
	// ready.
	reserved, readyAt time.Time
	// wake is why the agent was started again after a hibernation (a
	// Reason…), "" for any other start.
	wake string
	// connectedAt is the bus's time of the agent's latest connect, so
	// that busy and idle events of its previous process are told apart.
	connectedAt time.Time
	// busy says a delivery to the agent is in flight, as the bus last
	// reported (see Spawner.busyLocked); served, that one has been
	// answered since it started.
	busy, served bool
	// lastActive is when the agent last became busy, idle or ready: the
	// least recently active idle agent makes room at capacity.
	lastActive time.Time
	// idleTimer hibernates the agent after IdleTimeout without a
	// delivery.
	idleTimer *time.Timer
	// hibernate is why the spawner is stopping the agent to hibernate it
	// (ReasonIdle, ReasonCapacity), "" when it is not.
	hibernate string
	// rewake is why the agent is started again once it has exited,
	// after it was asked to stop (a Reason…): a delivery reached it, for
	// the bus's retry, or the bus held a message for it, its connection
	// gone; "" for none.
	rewake string
}

func newAgent(id string, sl *slot) *agent {
	return &agent{id: id, slot: sl, exited: make(chan struct{}), changed: make(chan struct{}), reserved: time.Now()}
}

// holdsLocked reports whether the agent has a regular subscription that
// matches topic.
func (a *agent) holdsLocked(topic string) bool {
	for _, p := range a.patterns {
		if p.Match(topic) {
			return true
		}
	}
	return false
}

// notifyLocked wakes the handlers waiting on a change of the agent.
func (a *agent) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// agentEnv returns the environment of an agent: base, less the variables
// the spawner sets and those that are the spawner's own, plus the
// agent's. BUB_CLIENT_ID goes because bub's client commands prefer it to
// BUB_AGENT_ID: an agent that runs `bub send-message` with the spawner's
// BUB_CLIENT_ID would take over the spawner's connection; BUB_TOKEN and
// BUB_TOKEN_FILE go because an agent must never act with the spawner's
// credential. token, when not empty, is the agent's own BUB_TOKEN.
func agentEnv(base []string, busURL, id, topic, workspace, token string) []string {
	set := map[string]string{
		"BUB_BUS_URL":       busURL,
		"BUB_AGENT_ID":      id,
		"BUB_DEFAULT_TOPIC": topic,
		"BUB_WORKSPACE":     workspace,
	}
	env := make([]string, 0, len(base)+len(set)+1)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if _, ours := set[name]; ours || name == "BUB_CLIENT_ID" || name == "BUB_TOKEN" || name == "BUB_TOKEN_FILE" {
			continue
		}
		env = append(env, kv)
	}
	for _, name := range []string{"BUB_BUS_URL", "BUB_AGENT_ID", "BUB_DEFAULT_TOPIC", "BUB_WORKSPACE"} {
		env = append(env, name+"="+set[name])
	}
	if token != "" {
		env = append(env, "BUB_TOKEN="+token)
	}
	return env
}

// exitDetail returns how a process ended, from cmd.Wait's error: Go's
// wording of the status and the exit code (-1 for a signal).
func exitDetail(cmd *exec.Cmd, err error) (status string, code int) {
	if st := cmd.ProcessState; st != nil {
		return st.String(), st.ExitCode()
	}
	if err != nil {
		return err.Error(), -1
	}
	return "exited", 0
}

// crashed reports whether an exit counts as a crash: a non-zero status or
// a signal, where the spawner did not ask for it.
func crashed(err error) bool {
	// ErrWaitDelay means the process exited 0 but something it started
	// still held its output open: not a crash.
	return err != nil && !errors.Is(err, exec.ErrWaitDelay)
}

// maxLogLine bounds one logged line of agent output; a longer line is
// logged in pieces rather than held in memory without end.
const maxLogLine = 64 << 10

// lineLogger is an agent's stdout or stderr: it logs each line with the
// agent's id. exec.Cmd calls Write from one goroutine per stream, and
// Wait returns only after the last Write, so it needs no lock.
type lineLogger struct {
	log    *slog.Logger
	stream string
	buf    []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	start := 0
	for {
		i := bytes.IndexByte(w.buf[start:], '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[start : start+i])
		start += i + 1
	}
	w.buf = append(w.buf[:0], w.buf[start:]...)
	for len(w.buf) >= maxLogLine {
		w.emit(w.buf[:maxLogLine])
		w.buf = append(w.buf[:0], w.buf[maxLogLine:]...)
	}
	return len(p), nil
}

// flush logs an unterminated last line.
func (w *lineLogger) flush() {
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = w.buf[:0]
	}
}

func (w *lineLogger) emit(line []byte) {
	w.log.Log(context.Background(), slog.LevelInfo, "agent output", "stream", w.stream, "line", string(bytes.TrimSuffix(line, []byte("\r"))))
}
