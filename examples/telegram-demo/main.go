// Command telegram-demo shows the Telegram bridge at work without a bot
// token: it runs the repository's fake Bot API (bridges/telegram/
// telegramtest) on a loopback port, and against it the real pieces, each
// a bub process: the bus, the spawner with the example echo agent, the
// bridge, and bub tail printing the bus's journal. A user then writes to
// the bot, and the demo prints each chat line, the bus messages it
// becomes (tg:42 in, a spawned agent, outbound:42 back) and the bot's
// answer in the chat.
//
// make telegram-demo builds bin/bub and bin/echo-agent and runs it:
//
//	go run ./examples/telegram-demo --bub bin/bub --agent bin/echo-agent
//
// Everything it starts lives in a temporary directory, removed at the
// end, and every process is stopped before it returns.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bub-bus/bub/bridges/telegram/telegramtest"
)

// user is the Telegram user (and private chat) of the demo.
const user = 42

// lines are what the user writes to the bot.
var lines = []string{"hello", "is anybody there?"}

// answerWait bounds the wait for the bot's answer to one line: the first
// starts an agent process.
const answerWait = 60 * time.Second

func main() {
	bub := flag.String("bub", "bin/bub", "the bub binary")
	agent := flag.String("agent", "bin/echo-agent", "the agent the spawner starts (examples/echo-agent)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo(ctx, os.Stdout, *bub, *agent); err != nil {
		fmt.Fprintln(os.Stderr, "telegram-demo:", err)
		os.Exit(1)
	}
}

// demo runs the whole show, writing it to out.
func demo(ctx context.Context, out io.Writer, bub, agent string) error {
	for _, bin := range []string{bub, agent} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%w (make telegram-demo builds bin/bub and bin/echo-agent)", err)
		}
	}
	dir, err := os.MkdirTemp("", "bub-telegram-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fake := telegramtest.New()
	defer fake.Close()
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	busURL := "ws://" + addr + "/"
	env := []string{"BUB_BUS_URL=" + busURL, "BUB_LOG_LEVEL=warn"}
	p := &procs{out: out, dir: dir}
	defer p.stopAll()

	fmt.Fprintf(out, "fake Telegram Bot API on %s (bot @%s); a bus on %s; everything in %s\n\n", fake.URL, telegramtest.BotUsername, busURL, dir)
	if err := p.start("bus", env, false, bub, "serve", "--listen", addr, "--data-dir", filepath.Join(dir, "data")); err != nil {
		return err
	}
	if err := waitReady(ctx, "http://"+addr+"/readyz"); err != nil {
		return fmt.Errorf("bub serve: %w; its log: %s", err, p.log("bus"))
	}
	// Say what the bus does: one line per journal event.
	if err := p.start("tail", env, true, bub, "tail"); err != nil {
		return err
	}
	abs, err := filepath.Abs(agent)
	if err != nil {
		return err
	}
	if err := p.start("spawner", env, false, bub, "spawner", "--command", abs,
		"--workspace-root", filepath.Join(dir, "workspaces"), "--data-dir", filepath.Join(dir, "spawner")); err != nil {
		return err
	}
	if err := p.start("telegram", append(env, "BUB_TELEGRAM_TOKEN="+telegramtest.Token), false, bub, "telegram",
		"--api-url", fake.URL, "--allow-users", fmt.Sprint(user), "--data-dir", filepath.Join(dir, "telegram")); err != nil {
		return err
	}
	// The bridge is ready once it polls for updates.
	if !fake.Wait(30*time.Second, func() bool { return fake.Calls("getUpdates") > 0 }) {
		return fmt.Errorf("the bridge never polled the fake Bot API; its log: %s", p.log("telegram"))
	}

	for i, text := range lines {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.say(fmt.Sprintf("\nchat %d ▸ user%d writes: %s\n", user, user, text))
		fake.Text(user, user, text)
		if !fake.Wait(answerWait, func() bool { return len(fake.SentTo(user)) > i }) {
			return fmt.Errorf("no answer in chat %d within %s; the spawner's log: %s; the bridge's: %s", user, answerWait, p.log("spawner"), p.log("telegram"))
		}
		// Let the journal lines of the reply come before the chat's.
		p.settle(500 * time.Millisecond)
		p.say(fmt.Sprintf("chat %d ◂ @%s answers: %s\n", user, telegramtest.BotUsername, fake.SentTo(user)[i].Text))
	}
	p.mu.Lock()
	p.muted = true // what follows is the agent's and the bridge's shutdown
	p.mu.Unlock()
	p.say("\nThat was: the chat became a telegram_message on tg:42; no agent subscribed, so the spawner (the fallback)\n" +
		"started one for tg:42; it answered on outbound:42, and the bridge sent that to the chat. With a real bot:\n" +
		"docs/guide/05-telegram.md.\n")
	return nil
}

// procs are the processes the demo started.
type procs struct {
	out io.Writer
	dir string

	mu    sync.Mutex // one line at a time on out, and list
	list  []*exec.Cmd
	last  time.Time // when the journal last printed
	muted bool      // the journal is no longer printed
	logs  map[string]string
}

// start runs bin args with env; with show, its stdout is printed line by
// line, indented, else it goes to a log file in the demo's directory.
func (p *procs) start(name string, env []string, show bool, bin string, args ...string) error {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logPath := filepath.Join(p.dir, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd.Stderr = log
	var stdout io.ReadCloser
	if !show {
		cmd.Stdout = log
	} else {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p.mu.Lock()
	p.list = append(p.list, cmd)
	if p.logs == nil {
		p.logs = map[string]string{}
	}
	p.logs[name] = logPath
	p.mu.Unlock()
	if show {
		go func() {
			sc := bufio.NewScanner(stdout)
			hidden := map[string]bool{} // message ids of the bus's own events
			for sc.Scan() {
				// The bus's own events (system:client.* to the
				// spawner, which watches them) would drown the chat;
				// a line's second field is its message's id.
				id := ""
				if f := strings.Fields(sc.Text()); len(f) > 1 {
					id = f[1]
				}
				if strings.Contains(sc.Text(), "system:") {
					hidden[id] = true
				}
				if hidden[id] {
					continue
				}
				p.mu.Lock()
				if !p.muted {
					fmt.Fprintf(p.out, "    bus │ %s\n", sc.Text())
				}
				p.last = time.Now()
				p.mu.Unlock()
			}
		}()
	}
	return nil
}

// say prints a line of the demo's own.
func (p *procs) say(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.out, s)
}

// settle waits until the journal has printed nothing for quiet.
func (p *procs) settle(quiet time.Duration) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		p.mu.Lock()
		since := time.Since(p.last)
		p.mu.Unlock()
		if since >= quiet {
			return
		}
		time.Sleep(quiet - since)
	}
}

// log returns what a process wrote to its log, for an error.
func (p *procs) log(name string) string {
	p.mu.Lock()
	path := p.logs[name]
	p.mu.Unlock()
	b, _ := os.ReadFile(path)
	return string(b)
}

// stopAll stops the processes, the last started first, with SIGINT, and
// kills one that has not exited within five seconds.
func (p *procs) stopAll() {
	p.mu.Lock()
	list := p.list
	p.list = nil
	p.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		cmd := list[i]
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls url until it answers 200.
func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("not ready within 30s")
}
