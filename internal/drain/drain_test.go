package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestCloseWaitsForWorkUnderWay(t *testing.T) {
	var g Group
	release := make(chan struct{})
	finished := false
	if !g.Go(func() {
		<-release
		finished = true
	}) {
		t.Fatal("Go refused work before Close")
	}
	closed := make(chan error)
	go func() { closed <- g.Close(context.Background()) }()
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !finished {
		t.Fatal("Close returned before the work under way finished")
	}
}

func TestCloseRefusesMoreWork(t *testing.T) {
	var g Group
	if err := g.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if g.Go(func() { t.Error("work ran after Close") }) {
		t.Fatal("Go took work after Close")
	}
}

func TestCloseGivesUpAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group
		release := make(chan struct{})
		g.Go(func() { <-release })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := g.Close(ctx); err != context.DeadlineExceeded {
			t.Fatalf("Close = %v, want %v", err, context.DeadlineExceeded)
		}
		close(release)
	})
}
