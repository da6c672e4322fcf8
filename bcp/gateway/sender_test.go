package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// A Reader that stops answering holds up its own channel only: with the
// bus's delivery timeout at a minute, another Reader's query and its
// Controller's delivery still go out at once, not a timeout later.
func TestSilentReaderDelaysNoOne(t *testing.T) {
	f := newFixtureWith(t, func(o *bus.Options) { o.DeliveryTimeout = time.Minute })
	g := f.gateway(nil)
	main := f.agent("main")
	scraper := f.reader("scraper")

	// researcher acknowledges its list, then never answers a query.
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	silent, err := peer.Dial(ctx, f.srv.URL, &peer.Options{ClientID: "researcher", Token: tokens["researcher"], Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs first: the handler returns before the connection closes
	got := make(chan string, 16)
	err = silent.Subscribe(ctx, peer.AgentTopic("researcher"), func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		got <- d.Type()
		if d.Type() == TypeQuery {
			<-release
		}
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { return readerReady(t, g, "researcher") }, bustest.Timeout, 10*time.Millisecond, "the researcher to be ready")
	main.query(cat1Query("researcher"))
	for typ := ""; typ != TypeQuery; {
		select {
		case typ = <-got:
		case <-time.After(bustest.Timeout):
			t.Fatal("the silent researcher got no query")
		}
	}

	// researcher now holds its query; scraper's channel goes on.
	start := time.Now()
	id := main.query(cat1Query("scraper"))
	scraper.expect(TypeQuery)
	scraper.send(TopicResponse, answer(id, map[string]any{"is_urgent": true, "sentiment": "neutral"}))
	scraper.expect(TypeValidationResult)
	if del := main.expect(TypeResponseDelivery); del["query_id"] != id {
		t.Fatalf("delivery %v, want %s", del, id)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("scraper's round trip took %v behind a silent researcher", took)
	}
}

// Messages an earlier gateway queued under their sequence alone are
// re-keyed by topic when the state file opens, in their order.
func TestOutboxMigration(t *testing.T) {
	dir := t.TempDir()
	st, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = st.db.Update(func(tx *bolt.Tx) error {
		for i, topic := range []string{"agent:main", "agent:researcher", "agent:main"} {
			data, _ := json.Marshal(outMessage{Topic: topic, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
			if err := tx.Bucket(bucketOutbox).Put([]byte(seqKey(uint64(i+1))), data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st.close()
	if st, err = openState(dir); err != nil {
		t.Fatal(err)
	}
	defer st.close()
	topics, err := st.outboxTopics()
	if err != nil || !slices.Equal(topics, []string{"agent:main", "agent:researcher"}) {
		t.Fatalf("topics = %v, %v", topics, err)
	}
	key, m, ok, err := st.nextOutbox("agent:main")
	if !ok || err != nil || string(m.Payload) != `{"n":0}` || string(key) != outboxKey("agent:main", 1) {
		t.Fatalf("next of agent:main = %q %+v %v %v, want the first message", key, m, ok, err)
	}
}

// A message the bus refuses for now (the gateway publishing faster than
// its rate, here) stays queued and goes once the bus takes it: the
// Controller gets its delivery and the Reader its result, though the two
// are sent at once and the gateway's bucket holds one publish.
func TestBusyBusDropsNothing(t *testing.T) {
	cfg := authConfig()
	for i := range cfg.Identities {
		if cfg.Identities[i].Name == "bcp-gateway" {
			cfg.Identities[i].Grant.Rate = auth.Rate{PerSecond: 2, Burst: 1}
		}
	}
	f := newFixtureWith(t, func(o *bus.Options) {
		authn, err := auth.New(cfg, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		o.Auth = authn
	})
	logs := &logLines{}
	g := f.gateway(func(o *Options) { o.Logger = slog.New(logs) })
	main := f.agent("main")
	researcher := f.reader("researcher")
	for i := range 3 {
		id := main.query(cat1Query("researcher"))
		researcher.expect(TypeQuery)
		researcher.send(TopicResponse, answer(id, map[string]any{"is_urgent": i%2 == 0, "sentiment": "neutral"}))
		researcher.expect(TypeValidationResult)
		if del := main.expect(TypeResponseDelivery); del["query_id"] != id {
			t.Fatalf("delivery %v, want %s", del, id)
		}
	}
	records, err := g.Audit(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if r.Event == "undeliverable" {
			t.Fatalf("audit: %+v", r)
		}
	}

	// Each topic's refusals are logged once when they start and once when
	// they end, not once per attempt.
	failed := logs.matching("send failed")
	if len(failed) == 0 {
		t.Fatal("the bus refused nothing: the test proves nothing")
	}
	// The last recovery line follows the bus's answer, which may come
	// after the subscriber got the message.
	var bad string
	require.Eventually(t, func() bool {
		streaks := map[string]int{}
		for _, l := range logs.matching("") {
			topic := l.attrs["topic"]
			switch {
			case strings.Contains(l.msg, "send failed"):
				if streaks[topic]++; streaks[topic] != 1 {
					bad = topic + ": a second failure line within one refusal streak"
					return true
				}
			case strings.Contains(l.msg, "takes the topic's messages again"):
				if streaks[topic]--; streaks[topic] != 0 {
					bad = topic + ": a recovery line without a failure line"
					return true
				}
			}
		}
		for _, n := range streaks {
			if n != 0 {
				return false
			}
		}
		return true
	}, bustest.Timeout, 10*time.Millisecond, "a refusal streak did not end")
	if bad != "" {
		t.Fatal(bad)
	}
}

// The refusals a message may outlast are retried, after as long as the
// bus asks for a rate limit; the others drop it.
func TestRefusedForNow(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *protocol.Error
		want time.Duration
	}{
		{"pending", &protocol.Error{Code: protocol.CodeLimitReached, Message: "limit reached: max_pending: 100000 pending messages; try again once they drain"}, retryPeriod},
		{"stored per identity", &protocol.Error{Code: protocol.CodeLimitReached, Message: "limit reached: max_stored_bytes_per_identity: x"}, retryPeriod},
		{"topic bytes", &protocol.Error{Code: protocol.CodeLimitReached, Message: "limit reached: max_topic_bytes: topic is 2000 bytes"}, 0},
		{"subscriptions", &protocol.Error{Code: protocol.CodeLimitReached, Message: "limit reached: max_subscriptions: this connection holds 1000 subscriptions"}, 0},
		{"unnamed limit", &protocol.Error{Code: protocol.CodeLimitReached, Message: "limit reached"}, 0},
		{"rate", &protocol.Error{Code: protocol.CodeRateLimited, Message: "rate limited", Data: json.RawMessage(`{"retry_after_ms":180}`)}, 180 * time.Millisecond},
		{"rate without data", &protocol.Error{Code: protocol.CodeRateLimited, Message: "rate limited"}, retryPeriod},
		{"rate, negative", &protocol.Error{Code: protocol.CodeRateLimited, Data: json.RawMessage(`{"retry_after_ms":-5}`)}, retryPeriod},
		{"rate, huge", &protocol.Error{Code: protocol.CodeRateLimited, Data: json.RawMessage(`{"retry_after_ms":1e300}`)}, maxRetryAfter},
		{"too many requests", &protocol.Error{Code: protocol.CodeTooManyRequests}, retryPeriod},
		{"draining", &protocol.Error{Code: protocol.CodeShuttingDown}, retryPeriod},
		{"forbidden", &protocol.Error{Code: protocol.CodeForbidden, Message: "forbidden"}, 0},
		{"invalid params", &protocol.Error{Code: protocol.CodeInvalidParams, Message: "invalid params: topic is 2000 bytes, more than max_topic_bytes 1024"}, 0},
	} {
		if got := refusedForNow(tc.err); got != tc.want {
			t.Errorf("%s: refusedForNow(%d %q) = %v, want %v", tc.name, tc.err.Code, tc.err.Message, got, tc.want)
		}
	}
}
