// Command bcp-eval runs the BCP evaluation (package eval, docs/BCP-EVAL.md):
// it prints the table on stdout and writes the JSON report to the path in
// BCP_EVAL_OUT, by default bench/results/bcp-eval.json.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/bub-bus/bub/bcp/eval"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bcp-eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defaultOut := os.Getenv("BCP_EVAL_OUT")
	if defaultOut == "" {
		defaultOut = filepath.Join("bench", "results", "bcp-eval.json")
	}
	out := fs.String("out", defaultOut, "where to write the JSON report (env BCP_EVAL_OUT)")
	userTasks := fs.Int("user-tasks", 0, "run only each suite's first N user tasks (0: all)")
	injections := fs.Int("injection-tasks", 0, "run only each suite's first N injection tasks (0: all)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	began := time.Now()
	rep, err := eval.Run(ctx, eval.Options{UserTasks: *userTasks, InjectionTasks: *injections, Progress: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "bcp-eval: %v\n", err)
		return 1
	}
	rep.WriteTable(stdout)
	data, err := json.MarshalIndent(rep, "", "  ")
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(*out), 0o755); err == nil {
			err = os.WriteFile(*out, append(data, '\n'), 0o644)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "bcp-eval: write report: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\n%d runs in %s; report: %s\n", len(rep.Runs), time.Since(began).Round(time.Second), *out)
	return 0
}
