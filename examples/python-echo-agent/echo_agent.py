#!/usr/bin/env python3
"""A bub agent in Python: the echo agent of examples/echo-agent, written on
the Python SDK (sdk/python, package bub_bus).

Run it from the repository's root as

    bub spawner --command "python3 $PWD/examples/python-echo-agent/echo_agent.py"

with the script's path in full: the spawner starts each agent in its own
workspace directory, where a relative path names no file (python3 would
exit with "can't open file"). It needs Debian's python3-websockets; the SDK
is found installed (pip install ./sdk/python) or, failing that, next to
this script in the checkout.

It reads BUB_BUS_URL, BUB_AGENT_ID, BUB_DEFAULT_TOPIC and BUB_TOKEN,
subscribes agent:{BUB_AGENT_ID} and its default topic, and answers each
telegram_message or plaintext_message with

    {"type": "plaintext_message", "text": "echo: <text>", "chat_id": <chat_id>, "agent_id": "<id>"}

on outbound:{chat_id}, chat_id coming from the payload, else from a default
topic tg:{chat_id}. It exits 0 on SIGTERM, and 1 when the bus ends its
connection for good (taken over, credential revoked), so that a spawner
restarts it; a dropped connection is reconnected.
"""

import asyncio
import os
import signal
import sys

try:
    from bub_bus import Bus, Delivery, Result
except ImportError:  # run from the checkout, not installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python", "src"))
    from bub_bus import Bus, Delivery, Result


def log(*parts: object) -> None:
    print("python-echo-agent:", *parts, file=sys.stderr, flush=True)


def chat_id_text(chat_id: object) -> str | None:
    """A chat_id (string or number) as the text of a topic, or None."""
    if isinstance(chat_id, bool) or chat_id is None:
        return None
    if isinstance(chat_id, (int, float, str)) and str(chat_id) != "":
        return str(chat_id)
    return None


async def main() -> int:
    try:
        bus = Bus.from_env(client_name="python-echo-agent")
    except ValueError as e:
        log(e, "(bub spawner sets it)")
        return 1
    if not bus.default_topic:
        log("BUB_DEFAULT_TOPIC must be set (bub spawner sets it)")
        return 1
    default_topic = bus.default_topic

    async def echo(d: Delivery) -> Result:
        if d.type not in ("telegram_message", "plaintext_message"):
            return Result(message=f"python-echo-agent does not handle {d.type!r}")
        log("handling message", d.message_id, "attempt", d.attempt)
        chat_id = d.payload.get("chat_id")
        chat = chat_id_text(chat_id)
        if chat is None and default_topic.startswith("tg:") and len(default_topic) > 3:
            chat = chat_id = default_topic[3:]
        if chat is None:
            return Result(message="no chat_id, and the default topic is not tg:{chat_id}")
        reply = {"type": "plaintext_message", "text": "echo: " + str(d.payload.get("text", "")), "chat_id": chat_id, "agent_id": bus.client_id}
        result = await d.bus.send_message("outbound:" + chat, reply)
        if not result.success:
            log("nobody took the reply:", result.reason)
        return Result(processed=True, message="echoed to outbound:" + chat)

    for pattern in (bus.agent_topic, default_topic):
        bus.subscribe(pattern)(echo)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async with bus:
        log("ready", bus.client_id, "on", default_topic)
        stopping = asyncio.create_task(stop.wait())
        ending = asyncio.create_task(bus.wait_closed())
        done, _ = await asyncio.wait({stopping, ending}, return_when=asyncio.FIRST_COMPLETED)
        if stopping in done:
            log("stopping")
            ending.cancel()
            return 0
        stopping.cancel()
        log("the bus ended the connection:", ending.exception() or "closed")
        return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
