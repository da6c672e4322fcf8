#!/usr/bin/env bash
# run-tck.sh runs the official A2A TCK (a2aproject/a2a-tck, branch
# 1.0-dev) against `bub serve --a2a-config` with a2a-tck-agent behind it,
# on loopback, over the JSON-RPC binding. See README.md.
#
#   TCK_DIR=~/a2a-tck GOOGLEAPIS_DIR=~/api-common-protos examples/a2a-tck-agent/run-tck.sh [--level must] [pytest args...]
#
# TCK_DIR         a checkout of a2aproject/a2a-tck at branch 1.0-dev (required)
# GOOGLEAPIS_DIR  a checkout with google/api and google/rpc *.proto, such as
#                 googleapis/api-common-protos (required: Debian packages
#                 neither googleapis-common-protos nor its protos)
# TCK_PORT        the port bub serve listens on (default 7999)
# TCK_WORK        where logs, the bus's data and the reports go (default a
#                 fresh temporary directory, kept)
# TCK_MESSAGE_ID_RETRIES=1  keep the bus's default, a repeated messageId is
#                 a retry (the TCK reuses ids, so some of its tests skip
#                 and its push delivery tests get no config)
#
# It needs Debian's python3-pytest python3-pytest-asyncio python3-httpx
# python3-grpcio python3-protobuf python3-jsonschema python3-jinja2 and
# protobuf-compiler; nothing from PyPI. The TCK's checked-in protobuf
# modules are made by protobuf 6 and do not load on Debian's 3.21, so
# they are regenerated with Debian's protoc, in TCK_DIR. pytest-html is
# not in Debian: the run writes the JUnit XML and the TCK's own
# compatibility report, not the HTML one. Debian's pytest is 7.2 and the
# TCK's pyproject asks for 8.0, so pytest runs with an ini of its own.
set -euo pipefail

: "${TCK_DIR:?set TCK_DIR to a checkout of a2aproject/a2a-tck (branch 1.0-dev)}"
: "${GOOGLEAPIS_DIR:?set GOOGLEAPIS_DIR to a checkout holding google/api/*.proto and google/rpc/*.proto}"
PORT="${TCK_PORT:-7999}"
WORK="${TCK_WORK:-$(mktemp -d -t a2a-tck.XXXXXX)}"
PYTHON="${PYTHON:-/usr/bin/python3}"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
TCK_DIR="$(cd "$TCK_DIR" && pwd)"
GOOGLEAPIS_DIR="$(cd "$GOOGLEAPIS_DIR" && pwd)"
mkdir -p "$WORK/gen" "$WORK/reports"

echo "TCK: $TCK_DIR at $(git -C "$TCK_DIR" rev-parse HEAD 2>/dev/null || echo 'unknown commit')"
echo "work: $WORK"

# The protobuf modules, with Debian's protoc.
protoc -I "$GOOGLEAPIS_DIR" -I /usr/include --python_out="$WORK/gen" \
	"$GOOGLEAPIS_DIR"/google/api/{annotations,client,field_behavior,http,launch_stage}.proto \
	"$GOOGLEAPIS_DIR"/google/rpc/{status,error_details}.proto
protoc -I "$TCK_DIR/specification" -I "$GOOGLEAPIS_DIR" -I /usr/include \
	--python_out="$TCK_DIR/specification/generated" "$TCK_DIR/specification/a2a.proto"

# The bus and the agent.
(cd "$REPO" && go build -o "$WORK/bub" ./cmd/bub && go build -o "$WORK/a2a-tck-agent" ./examples/a2a-tck-agent)
# The TCK gives every message of a kind one id for the whole session
# (tck_id("complete-task") is the same each time), so by default the bus
# takes its second "tck-input-required-…" for a retry of the first and
# answers the first task. TCK_MESSAGE_ID_RETRIES=1 keeps that default;
# see docs/A2A.md, "The official TCK".
header_only=true
if [ "${TCK_MESSAGE_ID_RETRIES:-}" = 1 ]; then header_only=false; fi
cat >"$WORK/a2a.yaml" <<EOF
idempotency_header_only: $header_only
agents:
  - name: tck
    description: The A2A TCK's system under test, a bus agent (examples/a2a-tck-agent).
    topic: tck:agent
    client_id: a2a-gw
    skills:
      - {id: tck, name: TCK Conformance, description: Plays the TCK's scenarios by message id prefix, tags: [tck]}
EOF
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT
# --webhook-allow-private: the TCK's push tests (PUSH-DELIVER-*) start
# their own webhook receiver on this machine and give the bus its
# loopback URL, which the bus's address policy refuses by default. Only
# here, for the run: a bus serving the internet keeps the default.
"$WORK/bub" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" --a2a-config "$WORK/a2a.yaml" \
	--webhook-allow-private >"$WORK/bub.log" 2>&1 &
pids+=($!)
# The bus first: the agent dials it once.
for _ in $(seq 300); do
	curl -fsS -o /dev/null "http://127.0.0.1:$PORT/a2a/tck/.well-known/agent-card.json" 2>/dev/null && break
	kill -0 "${pids[0]}" 2>/dev/null || { echo "bub serve exited:"; cat "$WORK/bub.log"; exit 1; }
	sleep 0.1
done
BUB_BUS_URL="ws://127.0.0.1:$PORT/" BUB_AGENT_ID=tck-agent BUB_DEFAULT_TOPIC=tck:agent \
	"$WORK/a2a-tck-agent" >"$WORK/agent.log" 2>&1 &
pids+=($!)

# Ready once the agent has said so.
for _ in $(seq 300); do
	grep -q "a2a-tck-agent ready" "$WORK/agent.log" 2>/dev/null && break
	kill -0 "${pids[0]}" 2>/dev/null || { echo "bub serve exited:"; cat "$WORK/bub.log"; exit 1; }
	sleep 0.1
done
grep -q "a2a-tck-agent ready" "$WORK/agent.log" || { echo "the agent never got ready:"; cat "$WORK/agent.log"; exit 1; }

cat >"$WORK/pytest.ini" <<'EOF'
[pytest]
asyncio_mode = auto
markers =
    core: Core A2A protocol requirements
    must: MUST-level requirements
    should: SHOULD-level requirements
    may: MAY-level requirements
    grpc: gRPC transport
    jsonrpc: JSON-RPC transport
    http_json: HTTP+JSON transport
    streaming: streaming
    integration: needs a running SUT
EOF

# What run_tck.py runs, less pytest-html. --webhook-host: the TCK's
# webhook receiver listens on 0.0.0.0, IPv4 only, and by default gives
# the bus a "localhost" URL, which may resolve to ::1 first.
level=()
if [ "${1:-}" = "--level" ]; then
	level=(-m "$2")
	shift 2
fi
cd "$TCK_DIR"
set +e
PYTHONPATH="$WORK/gen:$TCK_DIR" "$PYTHON" -m pytest -c "$WORK/pytest.ini" --rootdir="$TCK_DIR" -p no:cacheprovider \
	tests/compatibility/ --sut-host="http://127.0.0.1:$PORT/a2a/tck" --transport=jsonrpc --tb=short -q -rfEsx \
	--webhook-host=127.0.0.1 \
	"${level[@]}" --compatibility-report="$WORK/reports/compatibility" --junitxml="$WORK/reports/junitreport.xml" "$@"
rc=$?
set -e
echo "reports, logs: $WORK"
exit $rc
