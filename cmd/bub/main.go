// Command bub is the bub-bus binary: the bus daemon (bub serve) and the
// tools that agents and operators use to talk to it.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// stdio is what a subcommand reads from and writes to; tests pass buffers.
type stdio struct {
	in  io.Reader
	out io.Writer
	err io.Writer
	// cmd is the command running ("send-message", "dlq list"), which
	// errorf puts after "bub" so that every error reads the same way.
	cmd string
}

// command is one subcommand of bub. run returns the process exit status:
// 0 on success, 1 on failure, 2 on a usage error.
type command struct {
	summary string
	run     func(ctx context.Context, io stdio, args []string) int
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, io stdio, args []string) int) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, io stdio, args []string) int {
	if len(args) == 0 {
		usage(io.err)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		// Asked for: stdout, so that it pipes into grep or less.
		usage(io.out)
		return 0
	}
	if args[0] == "--version" {
		// What a newcomer types first; "bub version" is the command.
		args[0] = "version"
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(io.err, "bub: unknown command %q\n\n", args[0])
		usage(io.err)
		return 2
	}
	io.cmd = args[0]
	return cmd.run(ctx, io, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "bub: a message bus for AI agents, chat bridges and tools (JSON-RPC 2.0 over WebSocket).")
	fmt.Fprintln(w, "\nUsage: bub <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-14s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nThe environment sets what a deployment sets: BUB_BUS_URL and BUB_TOKEN for every")
	fmt.Fprintln(w, "command that talks to the bus, and the settings of the daemons serve, spawner,")
	fmt.Fprintln(w, "telegram, bcp gateway and mcp; a command's --help names each flag's variable.")
	fmt.Fprintln(w, "Run 'bub <command> --help' for a command's flags; 'bub --version' for the build.")
}

// subcommand picks the subcommand of a command with several (dlq,
// webhook) out of args, for usage and synopses: it returns the
// subcommand, its synopsis and its args, or, with ok false, the exit
// status after printing the help asked for or the usage error.
func subcommand(std stdio, name, usage string, synopses map[string]string, args []string) (sub, synopsis string, rest []string, code int, ok bool) {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintf(std.out, "Usage: bub %s\n", usage)
		return "", "", nil, 0, false
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(std.err, "Usage: bub %s\n", usage)
		return "", "", nil, 2, false
	}
	sub, rest = args[0], args[1:]
	if synopsis, ok = synopses[sub]; !ok {
		fmt.Fprintf(std.err, "bub %s: unknown subcommand %q\n\nUsage: bub %s\n", name, sub, usage)
		return "", "", nil, 2, false
	}
	return sub, synopsis, rest, 0, true
}

// errorf prints a one-line error as "bub COMMAND: ..." and returns exit
// status 1. A message that already starts with the command's name
// ("dlq list: ...") gets it once.
func errorf(io stdio, format string, args ...any) int {
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	switch {
	case io.cmd == "":
		fmt.Fprintf(io.err, "bub: %s\n", msg)
	case strings.HasPrefix(msg, io.cmd+": "), strings.HasPrefix(msg, io.cmd+" "):
		fmt.Fprintf(io.err, "bub %s\n", msg)
	default:
		fmt.Fprintf(io.err, "bub %s: %s\n", io.cmd, msg)
	}
	return 1
}
