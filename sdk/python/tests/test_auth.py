"""Credentials: a token the bus does not know, one outside its grant, and
one revoked by a reload while connected."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import run, token_hash

from bub_bus import Bus, Code, Delivery, Result, Revoked, RPCError, Unauthorized


def config(*names: str) -> str:
    lines = ["auth:", "  identities:"]
    for name in names:
        lines += [
            f"    - name: {name}",
            f'      token_sha256: "{token_hash(name + "-token")}"',
            f'      client_ids: ["{name}"]',
            '      publish:   {allow: ["work:*"]}',
            '      subscribe: {allow: ["work:*"]}',
        ]
    return "\n".join(lines) + "\n"


def test_credentials(start_bus: Any) -> None:
    server = start_bus(config=config("worker", "boss"))

    async def main() -> None:
        with pytest.raises(Unauthorized):
            async with Bus(server.url, client_id="worker", token="wrong-token"):
                pass
        with pytest.raises(Unauthorized):
            async with Bus(server.url, client_id="worker"):
                pass

        async def handle(d: Delivery) -> Result:
            return Result(processed=True)

        async with Bus(server.url, client_id="worker", token="worker-token") as worker, Bus(server.url, client_id="boss", token="boss-token") as boss:
            await worker.add_subscription("work:*", handle)
            assert (await boss.send_message("work:1", {"type": "t"})).acks[0].client_id == "worker"
            with pytest.raises(RPCError) as forbidden:
                await boss.send_message("elsewhere:1", {"type": "t"})
            assert forbidden.value.code == Code.FORBIDDEN
            with pytest.raises(RPCError) as forbidden:
                await worker.add_subscription("agent:*", handle)
            assert forbidden.value.code == Code.FORBIDDEN

    run(main())


def test_revoked_token_ends_the_bus(start_bus: Any) -> None:
    """A reload that drops the credential closes the connection (4003):
    the Bus ends with Revoked instead of reconnecting, and the token is
    refused from then on."""
    server = start_bus(config=config("worker", "boss"))

    async def main() -> None:
        async with Bus(server.url, client_id="worker", token="worker-token", reconnect_max=0.2) as worker:
            await worker.ping()
            await asyncio.to_thread(server.reload, config("boss"))
            with pytest.raises(Revoked):
                await asyncio.wait_for(worker.wait_closed(), 20)
            assert not worker.connected and isinstance(worker.ended, Revoked)
        with pytest.raises(Unauthorized):
            async with Bus(server.url, client_id="worker", token="worker-token"):
                pass

    run(main())
