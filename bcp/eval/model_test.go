package eval

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestModelReader runs the model Reader against a fake OpenAI-compatible
// endpoint that answers the dentist task's query in prose around a JSON
// object, as models do: the answer crosses the gateway, and the key goes
// as a bearer token.
func TestModelReader(t *testing.T) {
	t.Parallel()
	var calls, unauthorized atomic.Int32
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer test-key" {
			unauthorized.Add(1)
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !strings.Contains(req.Messages[len(req.Messages)-1].Content, `"id":"date"`) {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{
			map[string]any{"message": map[string]string{"role": "assistant", "content": "Here it is:\n```json\n{\"date\": \"2026-03-12\"}\n```"}},
		}})
	}))
	defer fake.Close()
	rep, err := Run(context.Background(), Options{Suites: []*Suite{workspace()}, UserTasks: 1, InjectionTasks: 1,
		Model: &ModelOptions{URL: fake.URL + "/v1/", Model: "fake", APIKey: "test-key"}})
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Total.Model
	if m == nil {
		t.Fatal("no model_reader in the report")
	}
	if m.Utility.Count != 1 || m.UtilityAttack.Count != 1 || m.AttackBeyond.Count != 0 || m.AnswersRefused != 0 {
		t.Errorf("model Reader: %+v; want utility 1/1 and 1/1, nothing beyond, nothing refused", *m)
	}
	if calls.Load() != 2 || unauthorized.Load() != 0 {
		t.Errorf("%d completions asked, %d without the key; want 2 and 0", calls.Load(), unauthorized.Load())
	}
}
