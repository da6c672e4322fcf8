package main

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestParseRelays(t *testing.T) {
	got, err := parseRelays(" telegram = 42, tg:43 ; slack=U7;")
	want := map[string][]string{"telegram": {"42", "tg:43"}, "slack": {"U7"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("parseRelays = %v, %v; want %v", got, err, want)
	}
	for in, msg := range map[string]string{
		"telegram":              "want NAME=USER1,USER2",
		"=42":                   "want NAME=USER1,USER2",
		"telegram=":             "relay telegram lists no users",
		"telegram=1;telegram=2": "relay telegram given twice",
	} {
		if _, err := parseRelays(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseRelays(%q) = %v, want %q", in, err, msg)
		}
	}
}

// The relay and approver flags say what is wrong before anything starts.
func TestApprovalFlagsUsage(t *testing.T) {
	t.Setenv("BUB_TELEGRAM_TOKEN", "123456789:AAbbCCddEEffGGhhIIjjKKllMMnnOOppQQr")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bcp", "gateway", "--agents", "x", "--data-dir", "y", "--relays", "telegram"}, "--relays: \"telegram\": want NAME=USER1,USER2"},
		{[]string{"telegram", "--approver-chat", "-100"}, "--approver-chat and --approvers go together"},
		{[]string{"telegram", "--approvers", "42"}, "--approver-chat and --approvers go together"},
		{[]string{"telegram", "--approver-chat", "-100", "--approvers", "4x"}, `--approvers: "4x" is not a numeric id`},
	} {
		code, _, stderr := runCLI(context.Background(), "", tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("bub %v: exit %d, %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
