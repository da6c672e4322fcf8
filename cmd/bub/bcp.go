package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/bub-bus/bub/bcp"
)

func init() {
	register("bcp", "check agent definitions, try specs, run the BCP gateway and its agent tools", runBCP)
}

const bcpSynopsis = `bcp <subcommand>

Subcommands:
  check DIR|FILE
      Load and check every agent definition (*.md) in DIR, or the one in
      FILE; print every problem, or a summary of agents, channels and
      subscription costs.
  validate --query Q.json --response R.json [--reject-anomalies]
      Validate a Reader's response against a query spec and print, as JSON,
      the normalized response, the declared and measured bits and the
      anomalies, or the rejection with its code. "-" reads stdin.
` + bcpRuntimeSynopsis + `

The rules and codes are in docs/BCP.md.`

func runBCP(ctx context.Context, io stdio, args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(io.err, "Usage: bub %s\n", bcpSynopsis)
		return 2
	}
	switch args[0] {
	case "check":
		io.cmd = "bcp check"
		return runBCPCheck(io, args[1:])
	case "validate":
		io.cmd = "bcp validate"
		return runBCPValidate(io, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintf(io.out, "Usage: bub %s\n", bcpSynopsis)
		return 0
	}
	if run, ok := bcpRuntimeCommands[args[0]]; ok {
		io.cmd = "bcp " + args[0]
		return run(ctx, io, args[1:])
	}
	fmt.Fprintf(io.err, "bub: unknown bcp subcommand %q\n\nUsage: bub %s\n", args[0], bcpSynopsis)
	return 2
}

func runBCPCheck(io stdio, args []string) int {
	fs := newFlagSet(io, "bcp check", "bcp check DIR|FILE\n\nLoads and checks every agent definition (*.md) in DIR, each on its own and together,\nor the one in FILE on its own.")
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return usagef(io, "bcp check", "name one directory of agent definitions, or one definition file (see bub bcp check --help)")
	}
	path := fs.Arg(0)
	defs, code := checkedDefinitions(io, path, loadDefinitions, "")
	if code != 0 {
		return code
	}
	printDefinitions(io.out, path, defs)
	if info, err := os.Stat(path); err == nil && !info.IsDir() {
		fmt.Fprintf(io.out, "checked on its own; bub bcp check %s also matches each channel with its peer's\n", filepath.Dir(path))
	}
	return 0
}

// loadDefinitions loads the definitions of a directory, or the one
// definition of a file, checked on its own.
func loadDefinitions(path string) ([]*bcp.Definition, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return bcp.LoadDefinitions(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// The file's own checks only: its peers are in other files, so
	// matching channels needs the directory.
	def, err := bcp.ParseDefinition(path, data)
	if err != nil {
		return nil, err
	}
	return []*bcp.Definition{def}, nil
}

// printDefinitions is the summary an operator reads before deploying: who
// may ask whom, within which budget, and what each subscription costs.
func printDefinitions(w io.Writer, dir string, defs []*bcp.Definition) {
	channels, subs := 0, 0
	for _, d := range defs {
		channels += len(d.Channels)
		for _, c := range d.Channels {
			subs += len(c.Subscriptions)
		}
	}
	fmt.Fprintf(w, "%s: %d agent%s, %d channel%s, %d subscription%s\n", dir,
		len(defs), bcpPlural(len(defs)), channels, bcpPlural(channels), subs, bcpPlural(subs))
	for _, d := range defs {
		taint := ""
		if d.BaseTaint != 0 {
			taint = ", base taint " + d.BaseTaint.String()
		}
		fmt.Fprintf(w, "%s (%s%s)\n", d.Name, d.File, taint)
		for _, c := range d.Channels {
			limits := ""
			if c.MaxCat2Queries > 0 {
				limits += fmt.Sprintf(", %d cat-2 queries", c.MaxCat2Queries)
			}
			if c.MaxCat3Queries > 0 {
				limits += fmt.Sprintf(", %d cat-3 queries", c.MaxCat3Queries)
			}
			if c.AnomalyPolicy == bcp.RejectAnomalies {
				limits += ", anomalies rejected"
			}
			fmt.Fprintf(w, "  %s of %s: max category %d, budget %v%s\n", c.Role, c.Peer, c.MaxCategory, c.BudgetBits, limits)
			for _, s := range c.Subscriptions {
				fmt.Fprintf(w, "    subscription %s: category %d, %v\n", s.ID, s.Spec.Category, s.Spec.Cost())
			}
		}
	}
}

// bcpValidateOutput is what bub bcp validate prints: the Result when the
// response is accepted, the error otherwise, and which input it is about.
type bcpValidateOutput struct {
	OK bool `json:"ok"`
	*bcp.Result
	Error *bcp.Error `json:"error,omitempty"`
	// In is "query" or "response": the file the error's path points into.
	In string `json:"in,omitempty"`
}

func runBCPValidate(io stdio, args []string) int {
	fs := newFlagSet(io, "bcp validate", "bcp validate --query Q.json --response R.json [--reject-anomalies]\n\nValidates a response against a query spec and prints the outcome as JSON.")
	queryPath := fs.String("query", "", "query spec file (JSON); - reads stdin")
	responsePath := fs.String("response", "", "response file (JSON); - reads stdin")
	rejectAnomalies := fs.Bool("reject-anomalies", false, "reject responses with anomalies instead of flagging them")
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	switch {
	case fs.NArg() != 0:
		return usagef(io, "bcp validate", "unexpected argument %q; name the files with --query and --response", fs.Arg(0))
	case *queryPath == "" && *responsePath == "":
		return usagef(io, "bcp validate", "no --query and no --response: pass --query Q.json --response R.json")
	case *queryPath == "":
		return usagef(io, "bcp validate", "no --query: pass the query spec file with --query Q.json")
	case *responsePath == "":
		return usagef(io, "bcp validate", "no --response: pass the Reader's response file with --response R.json (- reads stdin)")
	case *queryPath == "-" && *responsePath == "-":
		return usagef(io, "bcp validate", "--query and --response cannot both read stdin (-)")
	}
	query, err := readBCPInput(io, *queryPath)
	if err != nil {
		return errorf(io, "read query: %v", err)
	}
	response, err := readBCPInput(io, *responsePath)
	if err != nil {
		return errorf(io, "read response: %v", err)
	}
	opts := bcp.ValidateOptions{Anomalies: bcp.FlagAnomalies}
	if *rejectAnomalies {
		opts.Anomalies = bcp.RejectAnomalies
	}
	out := bcpValidateOutput{In: "query"}
	spec, err := bcp.ParseSpec(query)
	if err == nil {
		out.In = "response"
		out.Result, err = spec.Validate(response, opts)
	}
	if err != nil && !errors.As(err, &out.Error) {
		return errorf(io, "%v", err)
	}
	out.OK = err == nil
	if out.OK {
		out.In = ""
	}
	enc := json.NewEncoder(io.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return errorf(io, "write result: %v", err)
	}
	if !out.OK {
		return 1
	}
	return 0
}

func readBCPInput(io stdio, path string) ([]byte, error) {
	if path == "-" {
		return readBCPLimited(io.in)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBCPLimited(f)
}

// readBCPLimited reads one byte past the validator's limit, so an oversized
// input is rejected by the validator with its code rather than read whole.
func readBCPLimited(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, bcp.MaxResponseBytes+1))
}

func bcpPlural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// checkedDefinitions loads the agent definitions at path with load and
// prints every problem they have, one per line; on any, or when there are
// no definitions at all ("0 agents" and exit 0 hid a wrong directory), it
// returns the exit status, with after appended to the summary line.
func checkedDefinitions(io stdio, path string, load func(string) ([]*bcp.Definition, error), after string) ([]*bcp.Definition, int) {
	defs, err := load(path)
	if err != nil {
		var problems bcp.Errors
		if !errors.As(err, &problems) {
			return nil, errorf(io, "%v", err)
		}
		for _, p := range problems {
			fmt.Fprintln(io.err, p)
		}
		return nil, errorf(io, "%s: %d problem%s in the agent definitions%s", path, len(problems), bcpPlural(len(problems)), after)
	}
	if len(defs) == 0 {
		return nil, errorf(io, "%s: no agent definitions (*.md files) in this directory", path)
	}
	return defs, 0
}
