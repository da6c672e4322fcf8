package bus_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/bub-bus/bub/bus"
)

// TestExtendRefusesConflicts: an add-on that asks for one of the core's
// HTTP paths, or for a path or method another registered, stops the
// start with an error that names it, and registering outside Extend
// panics rather than race the read loops.
func TestExtendRefusesConflicts(t *testing.T) {
	nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	method := bus.Method{Serve: func(context.Context, *bus.Caller, json.RawMessage) (any, error) { return nil, nil }}
	for _, tc := range []struct {
		name   string
		extend func(s *bus.Server) error
		want   string
	}{
		{"core path", func(s *bus.Server) error { return s.Handle("/healthz", nop) }, `HTTP path "/healthz" is the core's`},
		{"path twice", func(s *bus.Server) error {
			if err := s.Handle("/v1/x", nop); err != nil {
				return err
			}
			return s.Handle("/v1/x", nop)
		}, `HTTP path "/v1/x"`},
		{"core method", func(s *bus.Server) error { return s.HandleMethod("sendMessage", method) }, `method "sendMessage" is registered already`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := bus.New(&bus.Options{Extensions: []bus.Extension{bus.ExtensionFunc(tc.extend)}})
			if err == nil {
				_ = s.Shutdown(context.Background())
				t.Fatalf("the start succeeded; want an error saying %s", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q; want it to say %s", err, tc.want)
			}
		})
	}

	s, err := bus.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "outside Extend") {
			t.Fatalf("HandleMethod after the start: recovered %v; want a panic saying it is outside Extend", p)
		}
	}()
	_ = s.HandleMethod("late.method", method)
}
