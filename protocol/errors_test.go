package protocol_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/bub-bus/bub/protocol"
)

func TestCodeOf(t *testing.T) {
	err := protocol.Errorf(protocol.ErrInvalidParams, "topic is required")
	if got := protocol.CodeOf(err); got != protocol.CodeInvalidParams {
		t.Errorf("CodeOf = %d", got)
	}
	if got := err.Error(); got != "invalid params: topic is required" {
		t.Errorf("message = %q", got)
	}
	if w := protocol.WireError(err); w.Code != protocol.CodeInvalidParams || w.Message != err.Error() {
		t.Errorf("WireError = %+v", w)
	}
	if got := protocol.CodeOf(os.ErrNotExist); got != protocol.CodeInternalError {
		t.Errorf("CodeOf(plain error) = %d", got)
	}
}

// TestProtocolDocListsEveryCode keeps docs/PROTOCOL.md in step with the
// code table.
func TestProtocolDocListsEveryCode(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range protocol.Codes {
		if !strings.Contains(string(doc), "`"+strconv.FormatInt(e.Code, 10)+"`") {
			t.Errorf("docs/PROTOCOL.md does not list code %d (%s)", e.Code, e.Message)
		}
	}
	for _, p := range protocol.Policies {
		if !strings.Contains(string(doc), "`"+string(p)+"`") {
			t.Errorf("docs/PROTOCOL.md does not describe policy %s", p)
		}
	}
}
