package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestToolSubscriptions: put, get, list and delete, in both stores; a
// record changed after it was written, or stored under another key, is
// refused naming its thread, never its key.
func TestToolSubscriptions(t *testing.T) {
	ts := &ToolSubscription{Key: strings.Repeat("ab", 32), GroupID: "tg:1", ToolCallID: "call-1", Topic: "agent:a", Owner: "a", Created: time.Unix(1, 0).UTC()}
	for name, open := range map[string]func(t *testing.T) *Store{
		"file": func(t *testing.T) *Store {
			s, err := Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"memory": func(*testing.T) *Store { return OpenMemory() },
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			if err := s.PutToolSubscription(ts); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetToolSubscription(ts.Key)
			if err != nil || *got != *ts {
				t.Fatalf("get: %+v, %v", got, err)
			}
			all, err := s.ToolSubscriptions()
			if err != nil || len(all) != 1 || *all[0] != *ts {
				t.Fatalf("list: %+v, %v", all, err)
			}
			if got, err := s.GetToolSubscription("other"); got != nil || err != nil {
				t.Errorf("get of no key: %+v, %v", got, err)
			}
			if err := s.DeleteToolSubscription(ts.Key); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteToolSubscription(ts.Key); err != nil {
				t.Errorf("delete again: %v", err)
			}
			if all, err := s.ToolSubscriptions(); err != nil || len(all) != 0 {
				t.Errorf("after delete: %+v, %v", all, err)
			}
		})
	}

	v, err := EncodeToolSubscription(ts)
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Replace(v, []byte("call-1"), []byte("call-2"), 1)
	tests := []struct {
		name string
		key  string
		v    []byte
		want string
	}{
		{"a byte changed", ts.Key, damaged, "checksum missing or wrong"},
		{"another key", strings.Repeat("cd", 32), v, "tg:1/call-1 does not hold the key"},
		{"no checksum", ts.Key, []byte(`{"v":2,"key":"x"}`), "checksum missing or wrong"},
	}
	for _, tt := range tests {
		_, err := DecodeToolSubscription([]byte(tt.key), tt.v)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), ts.Key) {
			t.Errorf("%s: %v; want ErrInvalid with %q and no key", tt.name, err, tt.want)
		}
	}
}
