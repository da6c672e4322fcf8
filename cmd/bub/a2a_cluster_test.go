package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/internal/checkfor"
)

// TestA2ACluster runs three bub serve processes as one cluster, each
// with --a2a-config: a task sent on node a, the node whose A2A server
// takes the agents' answers, is read on node b and followed there by a
// resumed stream; then a is killed with SIGKILL, and the task is still
// read on c and completed through another node's server, the stream on
// b getting the completion across the death.
func TestA2ACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of three bub serve processes; -short skips it")
	}
	dir := t.TempDir()
	a2aConfig := filepath.Join(dir, "a2a.yaml")
	if err := os.WriteFile(a2aConfig, []byte("agents:\n  - {name: w, topic: \"agent:w\", client_id: a2a-gw}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c"}
	listen := make([]string, len(ids))
	routes := make([]string, len(ids))
	for i := range ids {
		listen[i], routes[i] = freeAddr(t), freeAddr(t)
	}
	nodes := make([]*daemon, len(ids))
	for i, id := range ids {
		var others []string
		for j, r := range routes {
			if j != i {
				others = append(others, "nats://"+r)
			}
		}
		nodes[i] = spawnBusAt(t, listen[i], filepath.Join(dir, id), "--a2a-config", a2aConfig, "--log-level", "info",
			"--cluster-name", "t", "--node-id", id, "--nats-listen", routes[i], "--nats-routes", strings.Join(others, ","),
			"--cluster-node-timeout", "4s")
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, d := range nodes {
				t.Logf("node %s's log:\n%s", ids[i], d.stderr)
			}
		}
	})
	url := func(i int) string { return nodes[i].http + "/a2a/w" }
	for i := range nodes {
		// The A2A door answers 503 until its node has joined the
		// cluster (a majority up) and its server has connected, which
		// it logs.
		checkfor.Check(t, time.Minute, func() error {
			if !strings.Contains(nodes[i].stderr.String(), "A2A serving") {
				return fmt.Errorf("node %s has not logged \"A2A serving\"", ids[i])
			}
			return nil
		})
		a2atest.AwaitCard(t, url(i))
	}
	// The node whose A2A server subscribed outbound:a2a- last takes the
	// answers (last match wins): an answer to no task, which it
	// rejects, names it. That node is the one killed, so the answer
	// after its death must find another node's server.
	probe := a2atest.StartAgent(t, nodes[0].url, "probe", "", "agent:probe")
	res, err := probe.Conn.SendMessage(t.Context(), "outbound:a2a-probe", map[string]any{"type": "plaintext_message", "text": "?"}, nil)
	if err != nil || len(res.Acks) != 1 {
		t.Fatalf("the probe's answer: %+v, %v", res, err)
	}
	a := slices.Index(ids, strings.TrimPrefix(res.Acks[0].ClientID, "a2a-gw-"))
	if a < 0 {
		t.Fatalf("the probe's answer went to %q, no node's A2A server", res.Acks[0].ClientID)
	}
	b, c := (a+1)%3, (a+2)%3
	t.Logf("node %s's A2A server takes the answers; it will be killed", ids[a])
	agent := a2atest.StartAgent(t, nodes[c].url, "w", "", "agent:w")

	task, p, last := agent.StartWorking(t, url(a), "m-1", "write")
	follow, last := agent.FollowElsewhere(t, url(b), task, p, last)
	var got spec.Task

	nodes[a].kill() // SIGKILL
	killed := time.Now()
	a2atest.Post(t, url(c), "GetTask", map[string]any{"id": task.ID}).Decode(t, &got)
	if got.ID != task.ID || len(got.Artifacts) != 1 {
		t.Fatalf("GetTask on c after a was killed: %+v", got)
	}
	// Until the others presume a dead (--cluster-node-timeout), its
	// server's subscription is the one the answer goes to, and the
	// delivery fails.
	agent.CompleteAfterDeath(t, p, follow, last, time.Minute)
	t.Logf("the answer reached a survivor's A2A server %v after node %s was killed", time.Since(killed).Round(time.Millisecond), ids[a])
	var list spec.ListTasksResponse
	a2atest.Post(t, url(c), "ListTasks", map[string]any{}).Decode(t, &list)
	if list.TotalSize != 1 || list.Tasks[0].Status.State != spec.TaskStateCompleted {
		t.Fatalf("ListTasks on c: %+v", list)
	}
}
