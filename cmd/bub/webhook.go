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
	register("webhook", "add, remove and list the running bus's webhook subscriptions (a URL as subscriber)", runWebhook)
}

const webhookUsage = `webhook <add|remove|list> [flags]

Talks to the running bus, with a credential that has admin:
  bub webhook add --name NAME --url URL --pattern PATTERN --secret-file FILE [--policy P]
  bub webhook remove NAME
  bub webhook list

The bus POSTs each delivery to the URL, signed with the secret
(Bub-Signature; docs/PROTOCOL.md, "Webhooks out"), and keeps the
subscription across restarts until it is removed. Those of the
configuration file (webhooks: out:) are listed, not removed.
Every subcommand takes --json for machine-readable output.`

var webhookSynopses = map[string]string{
	"add": "webhook add --name NAME --url URL --pattern PATTERN --secret-file FILE [--policy P] [--json]\n\n" +
		"Subscribes URL to PATTERN as the clientId bub-webhook-NAME. The secret, read from\n" +
		"FILE (surrounding whitespace dropped), signs every delivery; it is never shown again.",
	"remove": "webhook remove NAME [--json]\n\nRemoves the webhook subscription NAME; its pending retries are dead-lettered.",
	"list":   "webhook list [--json]\n\nLists the webhook subscriptions, without their secrets.",
}

func runWebhook(ctx context.Context, std stdio, args []string) int {
	sub, synopsis, args, code, ok := subcommand(&std, "webhook", webhookUsage, webhookSynopses, args)
	if !ok {
		return code
	}
	std.cmd = "webhook " + sub
	// dlqConfig's print and client flags serve here as they do there.
	var cfg dlqConfig
	var add protocol.WebhookAddParams
	var secretFile, policy string
	fs := newFlagSet(std, "webhook "+sub, synopsis)
	cfg.client.addFlags(fs)
	fs.BoolVar(&cfg.json, "json", false, "print JSON instead of a table")
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "how long to wait for the bus")
	if sub == "add" {
		fs.StringVar(&add.Name, "name", "", "the subscription's name: letters, digits, '-' and '_' (required)")
		fs.StringVar(&add.URL, "url", "", "where deliveries are POSTed: http:// or https:// (required)")
		fs.StringVar(&add.Pattern, "pattern", "", "the topic pattern subscribed to (required)")
		fs.StringVar(&secretFile, "secret-file", "", "file holding the secret that signs deliveries (required)")
		fs.StringVar(&policy, "policy", "", "propagation policy (default: the bus's --default-policy)")
	}
	names, code, ok := parseInterleaved(fs, std, args)
	if !ok {
		return code
	}
	switch {
	case sub == "remove" && len(names) != 1:
		fmt.Fprintln(std.err, "bub webhook remove: name one subscription: bub webhook remove NAME")
		return 2
	case sub != "remove" && len(names) > 0:
		fmt.Fprintf(std.err, "bub webhook %s: unexpected argument %q\n", sub, names[0])
		return 2
	case sub == "add" && (add.Name == "" || add.URL == "" || add.Pattern == "" || secretFile == ""):
		fmt.Fprintln(std.err, "bub webhook add: --name, --url, --pattern and --secret-file are required")
		return 2
	}
	if sub == "add" {
		secret, err := readSecret("", secretFile, "", "--secret-file")
		if err != nil {
			return errorf(std, "webhook add: %v", err)
		}
		add.Secret, add.Policy = secret, protocol.Policy(policy)
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	conn, err := cfg.client.dial(ctx, std, peer.Options{CallTimeout: cfg.timeout, NoReconnect: true, PublishOnly: true})
	if err != nil {
		return errorf(std, "webhook %s: %v", sub, err)
	}
	defer conn.Close()
	switch sub {
	case "add":
		var w protocol.Webhook
		if err := conn.Call(ctx, protocol.MethodWebhookAdd, add, &w); err != nil {
			return errorf(std, "webhook add: %v", err)
		}
		return cfg.print(std, w, func(w2 io.Writer) { fmt.Fprintf(w2, "added %s (%s) → %s\n", w.Name, w.Pattern, w.URL) })
	case "remove":
		var w protocol.Webhook
		if err := conn.Call(ctx, protocol.MethodWebhookRemove, protocol.WebhookRemoveParams{Name: names[0]}, &w); err != nil {
			return errorf(std, "webhook remove: %v", err)
		}
		return cfg.print(std, w, func(w2 io.Writer) { fmt.Fprintf(w2, "removed %s\n", names[0]) })
	default: // list
		var r protocol.WebhookListResult
		if err := conn.Call(ctx, protocol.MethodWebhookList, struct{}{}, &r); err != nil {
			return errorf(std, "webhook list: %v", err)
		}
		return cfg.print(std, r, func(w io.Writer) { printWebhooks(w, r) })
	}
}

func printWebhooks(w io.Writer, r protocol.WebhookListResult) {
	if len(r.Webhooks) == 0 {
		fmt.Fprintln(w, "no webhook subscriptions")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPATTERN\tPOLICY\tURL\tFROM")
	for _, h := range r.Webhooks {
		from := "webhook.add"
		if h.Configured {
			from = "config"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.Name, h.Pattern, h.Policy, h.URL, from)
	}
	tw.Flush()
}
