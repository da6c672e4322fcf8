package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

func init() {
	register("subscriptions", "list and remove the running bus's durable subscriptions", runSubscriptions)
}

const subscriptionsUsage = `subscriptions <list|remove> [flags]

Talks to the running bus; needs an admin credential when it has auth:
  bub subscriptions list [--client ID] [--identity NAME] [--topic TOPIC] [--limit N] [--cursor C]
  bub subscriptions remove CLIENT_ID PATTERN

Durable subscriptions belong to a clientId and outlive its connections;
messages for an owner that is away are held for it (docs/PROTOCOL.md,
"Durable subscriptions"). Every subcommand takes --json.`

var subscriptionsSynopses = map[string]string{
	"list": "subscriptions list [--client ID] [--identity NAME] [--topic TOPIC] [--limit N] [--cursor C] [--json]\n\n" +
		"Lists the durable subscriptions, by owner and pattern, a page at a time: whether\n" +
		"the owner is away, how many messages are held for it, and its waker.\n" +
		"--topic lists those whose pattern matches that topic.",
	"remove": "subscriptions remove CLIENT_ID PATTERN [--json]\n\n" +
		"Ends one durable subscription, as its owner's unsubscribe would. Messages\n" +
		"already held for it are dead-lettered (subscriber_gone) when the owner is back\n" +
		"or their hold lifetime ends.",
}

func runSubscriptions(ctx context.Context, std stdio, args []string) int {
	sub, synopsis, args, code, ok := subcommand(&std, "subscriptions", subscriptionsUsage, subscriptionsSynopses, args)
	if !ok {
		return code
	}
	var (
		client  clientFlags
		asJSON  bool
		timeout time.Duration
		p       protocol.SubscriptionsListParams
	)
	fs := newFlagSet(std, "subscriptions "+sub, synopsis)
	client.addFlags(fs)
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the bus")
	if sub == "list" {
		fs.StringVar(&p.ClientID, "client", "", "only this owner's")
		fs.StringVar(&p.Identity, "identity", "", "only the owners with this identity")
		fs.StringVar(&p.Topic, "topic", "", "only those whose pattern matches this topic")
		fs.IntVar(&p.Limit, "limit", 100, "subscriptions per page")
		fs.StringVar(&p.Cursor, "cursor", "", "start at this cursor (printed at the end of a page)")
	}
	positional, code, ok := parseInterleaved(fs, std, args)
	if !ok {
		return code
	}
	switch {
	case sub == "list" && len(positional) > 0:
		fmt.Fprintf(std.err, "bub subscriptions list: unexpected argument %q\n", positional[0])
		return 2
	case sub == "remove" && len(positional) != 2:
		fmt.Fprintln(std.err, "bub subscriptions remove: name the owner and the pattern: bub subscriptions remove CLIENT_ID PATTERN")
		return 2
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := client.dial(ctx, std, peer.Options{CallTimeout: timeout, NoReconnect: true, PublishOnly: true})
	if err != nil {
		return errorf(std, "subscriptions %s: %v", sub, err)
	}
	defer conn.Close()
	if sub == "list" {
		var r protocol.SubscriptionsListResult
		if err := conn.Call(ctx, protocol.MethodSubscriptionsList, p, &r); err != nil {
			return errorf(std, "subscriptions list: %v", err)
		}
		return printResult(std, asJSON, r, func(w io.Writer) { printSubscriptions(w, r) })
	}
	var r protocol.SuccessResult
	if err := conn.Call(ctx, protocol.MethodSubscriptionsRemove, protocol.SubscriptionsRemoveParams{ClientID: positional[0], Topic: positional[1]}, &r); err != nil {
		return errorf(std, "subscriptions remove: %v", err)
	}
	return printResult(std, asJSON, r, func(w io.Writer) { fmt.Fprintf(w, "removed %s of %s\n", positional[1], positional[0]) })
}

func printSubscriptions(w io.Writer, r protocol.SubscriptionsListResult) {
	if len(r.Subscriptions) == 0 {
		fmt.Fprintln(w, "no durable subscriptions")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tPATTERN\tPOLICY\tSTATE\tHELD\tWAKER\tIDENTITY\tCREATED")
	for _, s := range r.Subscriptions {
		state := "connected"
		if s.Away {
			state = "away"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ClientID, s.Pattern, s.Policy, state, s.Held, orDash(s.Waker), orDash(s.Identity), s.Created)
	}
	tw.Flush()
	if r.NextCursor != "" {
		fmt.Fprintf(w, "more: --cursor %q\n", r.NextCursor)
	}
}
