package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/checkfor"
)

// busAt runs a bus with auth on addr over a store on disk, so that the
// test can stop it and start another on the same address and state.
func busAt(t *testing.T, addr, dir string) (stop func()) {
	t.Helper()
	authn, err := auth.New(authConfig(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bus.New(&bus.Options{Auth: authn, Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	// The old listener's port may take a moment to free.
	checkfor.Check(t, bustest.Timeout, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		hs.Close()
		st.Close()
	}
	t.Cleanup(stop)
	return stop
}

// The bus restarts mid-flow: what the gateway decides while the bus is
// down (a query expiring) waits in its outbox and arrives once the bus is
// back; queries go on afterwards, charged once.
func TestBusRestartMidFlow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	busDir := t.TempDir()
	stopBus := busAt(t, addr, busDir)

	f := newFixture(t)
	f.srv.URL = "ws://" + addr + "/" // the fixture's own bus stays unused
	g := f.gateway(func(o *Options) { o.QueryTTL = 1500 * time.Millisecond })
	main := f.agent("main")
	researcher := f.reader("researcher")

	id := main.query(cat2Query("researcher", 5))
	researcher.expect(TypeQuery)
	stopBus()
	// The query expires while the bus is down: the gateway writes the
	// failure in its audit log before it can tell anyone.
	checkfor.Check(t, bustest.Timeout, func() error {
		records, err := g.Audit(0)
		if err != nil {
			return err
		}
		for _, r := range records {
			if r.Event == "failure" && r.QueryID == id && r.Outcome == CodeExpired {
				return nil
			}
		}
		return fmt.Errorf("query %s not expired in the audit log: %+v", id, records)
	})
	busAt(t, addr, busDir)

	failed := main.expect(TypeQueryFailed)
	if failed["query_id"] != id || failed["code"] != CodeExpired {
		t.Fatalf("bcp_query_failed after the bus restart = %v", failed)
	}
	// Reconnected, the Reader hears its subscriptions again, whichever
	// of it and the gateway was back first (perhaps twice).
	researcher.expect(TypeSubscriptionsActive)

	id = main.query(cat2Query("researcher", 5))
	researcher.expectAfter(TypeSubscriptionsActive, TypeQuery)
	researcher.send(TopicResponse, answer(id, map[string]any{"sender": "Ada"}))
	researcher.expectAfter(TypeSubscriptionsActive, TypeValidationResult)
	if del := main.expect(TypeResponseDelivery); del["query_id"] != id {
		t.Fatalf("delivery = %v", del)
	}
	records, _ := g.Audit(0)
	charged := 0
	for _, r := range records {
		if r.Event == "query" && r.Outcome == "ok" {
			charged++
		}
	}
	if charged != 2 {
		t.Fatalf("%d charged queries in the audit log, want 2", charged)
	}
}
