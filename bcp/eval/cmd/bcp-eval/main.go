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
	"strconv"
	"time"

	"github.com/bub-bus/bub/bcp/eval"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bcp-eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", env("", "BCP_EVAL_OUT", "BUB_BCP_EVAL_OUT"), "where to write the JSON report (env BCP_EVAL_OUT or BUB_BCP_EVAL_OUT; default bench/results/bcp-eval.json)")
	userTasks := fs.String("user-tasks", env("0", "BUB_BCP_EVAL_USER_TASKS"), "run only each suite's first N user tasks, 0 for all (env BUB_BCP_EVAL_USER_TASKS)")
	injections := fs.String("injection-tasks", env("0", "BUB_BCP_EVAL_INJECTION_TASKS"), "run only each suite's first N injection tasks, 0 for all (env BUB_BCP_EVAL_INJECTION_TASKS)")
	modelURL := fs.String("model-url", env("", "BUB_BCP_EVAL_MODEL_URL"), "also run a model as the Reader: an OpenAI-compatible API's base URL, such as http://127.0.0.1:8080/v1; its key, if any, in BUB_BCP_EVAL_MODEL_KEY (env BUB_BCP_EVAL_MODEL_URL)")
	modelName := fs.String("model", env("", "BUB_BCP_EVAL_MODEL"), "the model's name, with -model-url (env BUB_BCP_EVAL_MODEL)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *out == "" {
		*out = filepath.Join("bench", "results", "bcp-eval.json")
	}
	n, err := strconv.Atoi(*userTasks)
	m, err2 := strconv.Atoi(*injections)
	if err != nil || err2 != nil || n < 0 || m < 0 {
		fmt.Fprintf(stderr, "bcp-eval: -user-tasks %q and -injection-tasks %q must be counts (0 for all)\n", *userTasks, *injections)
		return 2
	}
	var model *eval.ModelOptions
	if *modelURL != "" {
		model = &eval.ModelOptions{URL: *modelURL, Model: *modelName, APIKey: os.Getenv("BUB_BCP_EVAL_MODEL_KEY")}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	began := time.Now()
	rep, err := eval.Run(ctx, eval.Options{UserTasks: n, InjectionTasks: m, Progress: stderr, Model: model})
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

// env returns the first of the variables that is set, else def.
func env(def string, names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return def
}
