package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bub-bus/bub/bcp/gateway"
)

// runBCPAudit is bub bcp audit: it reads the gateway's audit mirror,
// which it may do while the gateway runs.
func runBCPAudit(_ context.Context, io stdio, args []string) int {
	var dataDir, channel string
	var since time.Duration
	var asJSON bool
	fs := newFlagSet(io, "bcp audit", "bcp audit --data-dir DIR [--channel CONTROLLER/READER] [--since 1h] [--json]\n\n"+
		"Prints the BCP gateway's audit log: every query, answer, validation, charge, delivery,\n"+
		"approval and refusal, with who, the channel, the category, declared and measured bits,\n"+
		"the budget left and the outcome (ok or a code). --json prints one record per line.")
	fs.StringVar(&dataDir, "data-dir", "", "the gateway's --data-dir (required)")
	fs.StringVar(&channel, "channel", "", "only this channel, as controller/reader")
	fs.DurationVar(&since, "since", 0, "only records this recent, e.g. 1h")
	fs.BoolVar(&asJSON, "json", false, "print JSON lines instead of a table")
	bindEnvAs(fs, "data-dir", "BUB_BCP_DATA_DIR")
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if dataDir == "" || fs.NArg() > 0 {
		return usagef(io, "bcp audit", "pass --data-dir DIR (the gateway's), and no arguments")
	}
	controller, reader, ok := strings.Cut(channel, "/")
	if channel != "" && (!ok || controller == "" || reader == "") {
		return usagef(io, "bcp audit", "--channel %q: want controller/reader, e.g. main/researcher", channel)
	}
	if since < 0 {
		return usagef(io, "bcp audit", "--since %v: want a positive duration", since)
	}
	cutoff := time.Time{}
	if since > 0 {
		cutoff = time.Now().Add(-since)
	}
	records, err := gateway.ReadAudit(dataDir, func(r *gateway.AuditRecord) bool {
		return (channel == "" || r.Controller == controller && r.Reader == reader) && !r.Time.Before(cutoff)
	})
	if err != nil {
		return errorf(io, "%v", err)
	}
	if asJSON {
		for _, r := range records {
			line, _ := json.Marshal(r)
			fmt.Fprintln(io.out, string(line))
		}
		return 0
	}
	w := tabwriter.NewWriter(io.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SEQ\tTIME\tEVENT\tFROM\tCHANNEL\tID\tCAT\tDECLARED\tMEASURED\tLEFT\tOUTCOME\tDETAIL")
	for _, r := range records {
		ch, id, left, cat := "-", "-", "-", "-"
		if r.Controller != "" || r.Reader != "" {
			ch = r.Controller + "/" + r.Reader
		}
		if r.QueryID != "" {
			id = r.QueryID
		} else if r.SubscriptionID != "" {
			id = "sub:" + r.SubscriptionID
		}
		if r.BudgetLeft != nil {
			left = fmt.Sprintf("%.1f", float64(*r.BudgetLeft))
		}
		if r.Category != 0 {
			cat = fmt.Sprint(int(r.Category))
		}
		detail := r.Detail
		from := orDash(r.From)
		if r.OnBehalfOf != "" {
			// A relay's decision: the human first, as the one who decided.
			from = r.OnBehalfOf + " via " + r.From
		}
		if len(detail) > 60 {
			detail = detail[:60] + "…"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\n", r.Seq, r.Time.UTC().Format(time.RFC3339), r.Event,
			from, ch, id, cat, float64(r.DeclaredBits), float64(r.MeasuredBits), left, r.Outcome, strings.ReplaceAll(detail, "\n", " "))
	}
	w.Flush()
	return 0
}
