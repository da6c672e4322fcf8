#!/usr/bin/env bash
# The compose stack, for real (make compose-test): starts docker-compose.yml
# under a project name of its own, with fresh credentials and a free port;
# sends the first message of a new chat from this host (bus, spawner, a new
# echo agent, its reply); holds a message for an absent agent, restarts the
# bus container and checks the message survived; takes a backup; then tears
# everything down, volumes included, whatever happened.
#
#   deploy/compose-test.sh BUB
#
# BUB is a bub binary that runs on this host. BUB_IMAGE names the image
# (built already: make compose-test builds it), COMPOSE the compose command.
set -euo pipefail
cd "$(dirname "$0")/.."
bub=$(realpath "${1:?usage: compose-test.sh BUB}")
image=${BUB_IMAGE:-bub-bus:dev}
read -r -a compose <<<"${COMPOSE:-docker-compose}"
started=$(date +%s)

project=bubtest$$
work=$(mktemp -d "${TMPDIR:-/tmp}/bub-compose-test.XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export BUB_IMAGE=$image BUB_PORT=$port BUB_SECRETS_DIR=$work/secrets
dc() { "${compose[@]}" -p "$project" -f docker-compose.yml "$@"; }

# finish runs on every exit. A signal can arrive while a command's output
# is redirected (wait_for silences what it polls), and the trap then runs
# with those redirections: fds 3 and 4 keep the script's own.
exec 3>&1 4>&2
pids=()
finish() {
	local code=$?
	trap - EXIT INT TERM
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	if [ "$code" != 0 ]; then
		echo "compose-test: FAILED (exit $code); the stack's logs:" >&4
		dc logs --no-color --tail 60 >&4 2>&1 || true
	fi
	dc down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || echo "compose-test: could not tear down project $project" >&4
	rm -rf "$work"
	echo "compose-test: torn down after $(($(date +%s) - started))s" >&3
	exit "$code"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

name=compose-test
# shellcheck source=deploy/testlib.sh
. deploy/testlib.sh
healthy() {
	[ "$(docker inspect --format '{{.State.Health.Status}}' "$(dc ps -q bus)")" = healthy ]
}

deploy/compose-secrets.sh "$bub" "$BUB_SECRETS_DIR" "$port"
# shellcheck source=/dev/null
. "$BUB_SECRETS_DIR/operator.env"

step "starting project $project on 127.0.0.1:$port"
dc up -d
wait_for 60 "the bus to be healthy" healthy
step "bus healthy"
gateway_serving() { dc logs --no-color bcp-gateway 2>/dev/null | grep -q "bcp gateway serving"; }
wait_for 60 "the BCP gateway to connect with its own credential" gateway_serving
step "bcp gateway serving"

# A listener for the replies, subscribed before the first message: replies
# to nobody are not kept. It is in place once a probe reaches it.
"$bub" listen --topic 'outbound:*' >"$work/replies" 2>"$work/replies.err" &
pids+=($!)
wait_for 20 "the reply listener to subscribe" \
	"$bub" send-message --topic "outbound:probe" --payload '{"type":"probe"}'

chat=$((RANDOM * 32768 + RANDOM))
step "first message to the new chat tg:$chat"
"$bub" send-message --topic "tg:$chat" --payload "{\"type\":\"telegram_message\",\"text\":\"hello compose\",\"chat_id\":\"$chat\"}" >"$work/send.out" 2>"$work/send.err" ||
	fail "send-message to tg:$chat failed: $(cat "$work/send.err")"
replied() { grep -q "\"topic\":\"outbound:$chat\".*echo: hello compose" "$work/replies"; }
wait_for 60 "the echo agent's reply on outbound:$chat" replied
step "reply: $(grep "outbound:$chat" "$work/replies" | head -1)"

# A message for an agent that does not exist: held, stored in the volume.
held=$("$bub" send-message --topic agent:ghost --payload "{\"type\":\"task_request\",\"task_id\":\"$project\"}" 2>/dev/null) ||
	fail "send-message to agent:ghost failed"
grep -q '"held":true' <<<"$held" || fail "agent:ghost was not held: $held"
step "held a message for agent:ghost; restarting the bus"

dc restart bus >/dev/null 2>&1
wait_for 60 "the bus to be healthy after the restart" healthy
step "bus healthy again"
dlq=$("$bub" dlq list --json)
grep -Eq '"entries": *\[\]' <<<"$dlq" || fail "the dead-letter queue is not empty after the restart: $dlq"

"$bub" listen --topic agent:ghost >"$work/ghost" 2>"$work/ghost.err" &
pids+=($!)
delivered() { grep -q "\"task_id\":\"$project\"" "$work/ghost"; }
wait_for 30 "the held message to reach agent:ghost after the restart" delivered
step "the held message survived the restart"

# The spawner reconnected on its own: a second chat gets an agent too.
chat2=$((chat + 1))
"$bub" send-message --topic "tg:$chat2" --payload "{\"type\":\"telegram_message\",\"text\":\"again\",\"chat_id\":\"$chat2\"}" >/dev/null 2>&1 ||
	fail "send-message to tg:$chat2 after the restart failed"
again() { grep -q "\"topic\":\"outbound:$chat2\".*echo: again" "$work/replies"; }
wait_for 60 "a reply from a new chat after the restart" again
step "the spawner serves new chats after the restart"

"$bub" backup "$work/backup.db" >/dev/null || fail "bub backup failed"
[ -s "$work/backup.db" ] || fail "bub backup wrote an empty file"
step "backup: $(wc -c <"$work/backup.db") bytes"
echo "compose-test: PASS"
