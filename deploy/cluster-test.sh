#!/usr/bin/env bash
# A three-node cluster, for real (make cluster-test): starts
# docker-compose.cluster.yml under a project name of its own, with a fresh
# credential and free ports; runs clustercheck (deploy/clustercheck), a
# bounded load with a subscriber that records every messageId, while this
# script kills one node and starts it again, cuts another off the network
# and reconnects it, then restarts all three one by one; clustercheck then
# accounts for every message the bus accepted (delivered, or dead-lettered
# with its reason; none vanished) and counts the duplicates. Tears
# everything down, volumes included, whatever happened.
#
#   deploy/cluster-test.sh BUB CLUSTERCHECK
#
# BUB and CLUSTERCHECK are binaries that run on this host. BUB_IMAGE names
# the image (built already: make cluster-test builds it), COMPOSE the
# compose command. MESSAGES and LOAD_SECONDS size the load.
set -euo pipefail
cd "$(dirname "$0")/.."
bub=$(realpath "${1:?usage: cluster-test.sh BUB CLUSTERCHECK}")
check=$(realpath "${2:?usage: cluster-test.sh BUB CLUSTERCHECK}")
image=${BUB_IMAGE:-bub-bus:dev}
read -r -a compose <<<"${COMPOSE:-docker-compose}"
messages=${MESSAGES:-2000}
load_seconds=${LOAD_SECONDS:-70}
started=$(date +%s)

project=bubcluster$$
work=$(mktemp -d "${TMPDIR:-/tmp}/bub-cluster-test.XXXXXX")
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export BUB_IMAGE=$image BUB_PORT_1=$(free_port) BUB_PORT_2=$(free_port) BUB_PORT_3=$(free_port)
export BUB_CLUSTER_CONFIG=$work/bus.yaml
dc() { "${compose[@]}" -p "$project" -f docker-compose.cluster.yml "$@"; }
network=${project}_bubcluster

# finish runs on every exit; fds 3 and 4 keep the script's own output
# for a trap that runs inside a redirection (see compose-test.sh).
exec 3>&1 4>&2
pids=()
finish() {
	local code=$?
	trap - EXIT INT TERM
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	if [ "$code" != 0 ]; then
		# The whole logs are kept: a cluster's failure is often decided
		# well before the line that reports it.
		mkdir -p build/cluster-test
		kept=build/cluster-test/$project
		{ dc logs --no-color; echo "--- clustercheck"; cat "$work/check.err" "$work/check.out"; } >"$kept.log" 2>&1 || true
		# What decides the failure comes last: a CI page may show only
		# the last lines of a long output.
		echo "cluster-test: the nodes' last lines (all of them in $kept.log):" >&4
		dc logs --no-color --tail 15 >&4 2>&1 || true
		echo "cluster-test: clustercheck's last lines:" >&4
		tail -n 12 "$work/check.err" >&4 2>/dev/null || true
		cat "$work/check.out" >&4 2>/dev/null || true
		echo "cluster-test: FAILED (exit $code): ${failure:-see above}; the last step begun: ${last_step:-none}" >&4
	fi
	dc down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || echo "cluster-test: could not tear down project $project" >&4
	rm -rf "$work"
	echo "cluster-test: torn down after $(($(date +%s) - started))s" >&3
	exit "$code"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

name=cluster-test
last_step="starting" failure=""
# shellcheck source=deploy/testlib.sh
. deploy/testlib.sh
container() { dc ps -q "$1"; }
healthy() {
	local n
	for n in "$@"; do
		[ "$(docker inspect --format '{{.State.Health.Status}}' "$(container "$n")")" = healthy ] || return 1
	done
}

# One credential, in the one configuration every node reads: a token
# valid on one node is valid on all. The timeouts are shortened so that
# a dead node's deliveries are retried within the test's time.
out=$("$bub" auth token 2>/dev/null)
token=$(sed -n 's/^token: //p' <<<"$out")
hash=$(sed -n 's/^token_sha256: //p' <<<"$out")
cat >"$BUB_CLUSTER_CONFIG" <<YAML
delivery_timeout: 5s
ping_interval: 5s
drain_timeout: 5s
retry_base_delay: 500ms
retry_delay_cap: 5s
max_attempts: 8
auth:
  identities:
    - name: loadtest
      token_sha256: "$hash"
      client_ids: ["load-*"]
      publish:   {allow: ["agent:*"]}
      subscribe: {allow: ["agent:*"]}
      admin: true                       # dlq.list
YAML
# The containers run as uid 65532, not as this user.
chmod 644 "$BUB_CLUSTER_CONFIG"

step "starting project $project on 127.0.0.1:$BUB_PORT_1, :$BUB_PORT_2, :$BUB_PORT_3"
dc up -d
wait_for 90 "the three nodes to be healthy" healthy b1 b2 b3
step "three nodes healthy"

BUB_BUS_URL="ws://127.0.0.1:$BUB_PORT_1/,ws://127.0.0.1:$BUB_PORT_2/,ws://127.0.0.1:$BUB_PORT_3/" BUB_TOKEN=$token \
	"$check" -messages "$messages" -duration "${load_seconds}s" -drain 45s -wait-calm -json "$work/account.json" >"$work/check.out" 2>"$work/check.err" &
checker=$!
pids+=("$checker")
step "load started: $messages messages over ${load_seconds}s"

sleep 5
step "docker kill b1"
docker kill "$(container b1)" >/dev/null
sleep 8
dc start b1 >/dev/null 2>&1
wait_for 90 "b1 to be healthy after its kill" healthy b1
step "b1 back"

sleep 3
step "docker network disconnect b2 (a partition longer than the 10 s node timeout)"
docker network disconnect "$network" "$(container b2)"
sleep 14
# The alias is the name the other nodes' routes use.
docker network connect --alias b2 "$network" "$(container b2)"
step "b2 reconnected"
sleep 5

for n in b1 b2 b3; do
	step "rolling restart: $n"
	dc restart --timeout 20 "$n" >/dev/null 2>&1
	wait_for 90 "$n to be healthy after its restart" healthy "$n"
done
step "rolling restart done"
# The 45 s of draining count from here too: on a slow host the
# disruptions can outlast the load. On a fast host the checker may
# have drained and exited already: then there is no one to tell.
kill -USR1 "$checker" 2>/dev/null || true

# clustercheck bounds itself: the load, then at most 45 s of draining.
if wait "$checker"; then result=0; else result=$?; fi
pids=()
cat "$work/check.out"
echo "cluster-test: the clients lost their node $(grep -c 'connection to the bus lost' "$work/check.err" || true) times and reconnected elsewhere"
step "clustercheck exited $result"
[ "$result" = 0 ] || fail "clustercheck found messages unaccounted for, or could not run"
echo "cluster-test: PASS"
