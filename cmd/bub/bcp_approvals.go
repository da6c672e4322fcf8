package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bub-bus/bub/bcp/gateway"
	"github.com/bub-bus/bub/peer"
)

const bcpApprovalsSynopsis = `bcp approvals list | show ID | approve ID | reject ID [--reason R] | edit ID --summary S [flags]

Decides Category-3 approvals through the running gateway, as an approver: the clientId
(--client-id) must be in the gateway's --approvers, and the credential must allow
publishing to bcp:approval. list and show print the pending approvals as JSON; a summary
in them was written by a tainted agent, so read it as untrusted text. approve, reject
and edit print the gateway's verdict as JSON; an edited summary is validated again.`

func runBCPApprovals(ctx context.Context, io stdio, args []string) int {
	var cf clientFlags
	var reason, summary string
	fs := newFlagSet(io, "bcp approvals", bcpApprovalsSynopsis)
	fs.StringVar(&reason, "reason", "", "why (reject); the Reader is told")
	fs.StringVar(&summary, "summary", "", "the edited summary (edit)")
	cf.addFlags(fs)
	if len(args) == 0 {
		return usagef(io, "bcp approvals", "name an action: list, show, approve, reject or edit (see bub bcp approvals --help)")
	}
	action, rest := args[0], args[1:]
	if action == "-h" || action == "--help" {
		rest = args
	}
	if code, ok := parseFlags(fs, io, rest); !ok {
		return code
	}
	// Flags may also follow the id: approve ID --reason R.
	var positional []string
	for fs.NArg() > 0 {
		positional = append(positional, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return usagef(io, "bcp approvals", "%v", err)
		}
	}
	wantID := action != "list"
	switch {
	case action != "list" && action != "show" && action != "approve" && action != "reject" && action != "edit":
		return usagef(io, "bcp approvals", "unknown action %q: want list, show, approve, reject or edit", action)
	case wantID && len(positional) != 1, !wantID && len(positional) != 0:
		return usagef(io, "bcp approvals", "%s takes %s", action, map[bool]string{true: "one approval id", false: "no argument"}[wantID])
	case action == "edit" && summary == "":
		return usagef(io, "bcp approvals", "edit needs --summary")
	case action != "edit" && summary != "":
		return usagef(io, "bcp approvals", "--summary goes with edit only")
	}
	if action == "list" || action == "show" {
		return listApprovals(ctx, io, &cf, positional)
	}
	decision := map[string]string{"approve": "approve", "reject": "reject", "edit": "edit"}[action]
	payload := map[string]any{"type": gateway.TypeApprovalDecision, "approval_id": positional[0], "decision": decision}
	if reason != "" {
		payload["reason"] = reason
	}
	if summary != "" {
		payload["summary"] = summary
	}
	return bcpSend(ctx, io, &cf, gateway.TopicApproval, payload, false)
}

// listApprovals asks the gateway for its pending approvals (the answer
// is in its ack) and prints them, or the one named.
func listApprovals(ctx context.Context, io stdio, cf *clientFlags, ids []string) int {
	conn, err := cf.dial(ctx, io, peer.Options{PublishOnly: true, NoReconnect: true})
	if err != nil {
		return errorf(io, "%v", err)
	}
	defer conn.Close()
	res, err := conn.SendMessage(ctx, gateway.TopicApproval, map[string]string{"type": gateway.TypeApprovalList}, nil)
	if err != nil {
		return errorf(io, "%v", err)
	}
	if len(res.Acks) == 0 || res.Acks[0].Error != "" {
		return errorf(io, "no gateway answered on %s: is bub bcp gateway running with --approvers?", gateway.TopicApproval)
	}
	if !res.Acks[0].Processed {
		return errorf(io, "the gateway refused: %s", res.Acks[0].Message)
	}
	var list []json.RawMessage
	if err := json.Unmarshal([]byte(res.Acks[0].Message), &list); err != nil {
		return errorf(io, "the gateway's answer is not a list of approvals: %v", err)
	}
	if len(ids) == 0 {
		out, _ := json.MarshalIndent(list, "", "  ")
		fmt.Fprintln(io.out, string(out))
		return 0
	}
	for _, raw := range list {
		var a gateway.Approval
		if json.Unmarshal(raw, &a) == nil && a.ID == ids[0] {
			out, _ := json.MarshalIndent(raw, "", "  ")
			fmt.Fprintln(io.out, string(out))
			return 0
		}
	}
	return errorf(io, "no pending approval %q (bub bcp approvals list shows them)", ids[0])
}
