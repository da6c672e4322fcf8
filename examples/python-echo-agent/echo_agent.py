#!/usr/bin/env python3
"""A bub agent in Python: the echo agent of examples/echo-agent, written
against the wire protocol (docs/PROTOCOL.md) with nothing but the
`websockets` package, to show that an agent needs no Go and no SDK.

Run it from the repository's root as

    bub spawner --command "python3 $PWD/examples/python-echo-agent/echo_agent.py"

with the script's path in full: the spawner starts each agent in its own
workspace directory, where a relative path names no file (python3 would
exit with "can't open file"). Debian: apt-get install python3-websockets.

It reads BUB_BUS_URL, BUB_AGENT_ID and BUB_DEFAULT_TOPIC, subscribes
agent:{BUB_AGENT_ID} and its default topic, and answers each telegram_message or plaintext_message with

    {"type": "plaintext_message", "text": "echo: <text>", "chat_id": <chat_id>, "agent_id": "<id>"}

on outbound:{chat_id}, chat_id coming from the payload, else from a default
topic tg:{chat_id}. It exits 0 on SIGTERM and 1 when the bus goes away, so
that a spawner restarts it.
"""

import asyncio
import itertools
import json
import os
import signal
import sys

import websockets

CALL_TIMEOUT = 30  # seconds; the bus's own delivery timeout


def log(*parts):
    print("python-echo-agent:", *parts, file=sys.stderr, flush=True)


class Peer:
    """One JSON-RPC 2.0 connection to the bus, used in both directions: our
    calls (initialize, subscribe, sendMessage) and the bus's processMessage
    calls share the socket, so the read loop never waits for a handler."""

    def __init__(self, ws, handler):
        self.ws = ws
        self.handler = handler
        self.ids = itertools.count(1)
        self.pending = {}  # request id -> future of the response
        self.tasks = set()  # running handlers, kept so they are not collected

    async def call(self, method, params):
        request_id = next(self.ids)
        future = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
        try:
            response = await asyncio.wait_for(future, CALL_TIMEOUT)
        finally:
            self.pending.pop(request_id, None)
        if "error" in response:
            error = response["error"]
            raise RuntimeError(f"{method}: bus answered {error.get('code')}: {error.get('message')}")
        return response.get("result")

    async def read_loop(self):
        async for raw in self.ws:
            message = json.loads(raw)
            for m in message if isinstance(message, list) else [message]:
                if "method" in m:
                    if "id" in m:  # a request: answer it off the read loop
                        task = asyncio.create_task(self.serve(m))
                        self.tasks.add(task)
                        task.add_done_callback(self.tasks.discard)
                else:
                    future = self.pending.get(m.get("id"))
                    if future is not None and not future.done():
                        future.set_result(m)

    async def serve(self, request):
        reply = {"jsonrpc": "2.0", "id": request["id"]}
        if request["method"] != "processMessage":
            reply["error"] = {"code": -32601, "message": f"method not found: {request['method']!r}"}
        else:
            try:
                reply["result"] = await self.handler(request.get("params") or {})
            except Exception as e:  # the bus records a failed delivery and retries
                reply["error"] = {"code": -32603, "message": f"internal error: {e}"}
        await self.ws.send(json.dumps(reply))


def chat_id_text(chat_id):
    """A chat_id (string or number) as the text of a topic, or None."""
    if isinstance(chat_id, bool) or chat_id is None:
        return None
    if isinstance(chat_id, (int, float, str)) and str(chat_id) != "":
        return str(chat_id)
    return None


async def main():
    # BUB_BUS_URL may list several nodes, comma-separated; this minimal
    # agent takes the first (the Go SDK tries them in turn).
    url = (os.environ.get("BUB_BUS_URL") or "ws://127.0.0.1:7892/").split(",")[0].strip()
    agent_id = os.environ.get("BUB_AGENT_ID")
    default_topic = os.environ.get("BUB_DEFAULT_TOPIC")
    if not agent_id or not default_topic:
        log("BUB_AGENT_ID and BUB_DEFAULT_TOPIC must be set (bub spawner sets them)")
        return 1

    peer = None

    async def handle(params):
        payload = params.get("payload") or {}
        kind = payload.get("type")
        if kind not in ("telegram_message", "plaintext_message"):
            return {"processed": False, "message": f"python-echo-agent does not handle {kind!r}"}
        log("handling message", params.get("messageId"), "attempt", params.get("attempt"))
        chat_id = payload.get("chat_id")
        chat = chat_id_text(chat_id)
        if chat is None and default_topic.startswith("tg:") and len(default_topic) > 3:
            chat = chat_id = default_topic[3:]
        if chat is None:
            return {"processed": False, "message": "no chat_id, and the default topic is not tg:{chat_id}"}
        reply = {"type": "plaintext_message", "text": "echo: " + str(payload.get("text", "")), "chat_id": chat_id, "agent_id": agent_id}
        result = await peer.call("sendMessage", {"topic": "outbound:" + chat, "payload": reply})
        if not result.get("success"):
            log("nobody took the reply:", result.get("reason"))
        return {"processed": True, "message": "echoed to outbound:" + chat}

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async with websockets.connect(url, max_size=4 << 20) as ws:
        peer = Peer(ws, handle)
        reader = asyncio.create_task(peer.read_loop())
        params = {
            "clientId": agent_id,
            "clientInfo": {"name": "python-echo-agent", "version": "1"},
            "defaultTopic": default_topic,
        }
        # On a bus with auth the spawner gives each agent its own token.
        # It goes in initialize, which works with every version of the
        # websockets package (the upgrade header's keyword has changed).
        if os.environ.get("BUB_TOKEN"):
            params["token"] = os.environ["BUB_TOKEN"]
        await peer.call("initialize", params)
        for pattern in ("agent:" + agent_id, default_topic):
            await peer.call("subscribe", {"topic": pattern})
        log("ready", agent_id, "on", default_topic)
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({reader, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if stopping in done:
            log("stopping")
            reader.cancel()
            return 0
        stopping.cancel()
        log("connection to the bus lost:", reader.exception() or "closed")
        return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
