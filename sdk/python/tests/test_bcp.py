"""BCP through a real `bub bcp gateway`: a Controller's query, a Reader's
answer from the spec, the normalized delivery, a refusal and a publish."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import run, token_hash

from bub_bus import Bus
from bub_bus.bcp import ActiveSubscription, Controller, Query, QueryFailed, Reader, Refused, ResponseDelivery, ValidationResult

MAIN = """---
name: main
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 1000
    subscriptions:
      - id: alerts
        category: 1
        fields:
          - name: urgent
            type: boolean
---
"""

RESEARCHER = """---
name: researcher
base_taint: high
bcp_channels:
  - peer: main
    role: reader
    max_category: 2
    budget_bits: 1000
---
"""


def identity(name: str, publish: str, subscribe: str) -> str:
    return (
        f"    - name: {name}\n"
        f'      token_sha256: "{token_hash(name + "-token")}"\n'
        f'      client_ids: ["{name}"]\n'
        f"      publish:   {{allow: {publish}}}\n"
        f"      subscribe: {{allow: {subscribe}}}\n"
    )


# docs/SECURITY.md's BCP shape, plus the gateway's grant (docs/BCP.md).
CONFIG = (
    "auth:\n  identities:\n"
    + identity("main", '["bcp:*"]', '["agent:{{clientId}}"]')
    + identity("researcher", '["bcp:*"]', '["agent:{{clientId}}"]')
    + identity("bcp-gateway", '["agent:*", "bcp:approval.requested.*"]', '["bcp:*", "system:client.*"]')
)


def test_bcp_round_trip(start_bus: Any, start_process: Any, bub: str, tmp_path: Path) -> None:
    server = start_bus(config=CONFIG)
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "main.md").write_text(MAIN)
    (agents / "researcher.md").write_text(RESEARCHER)
    start_process(
        [bub, "bcp", "gateway", "--agents", str(agents), "--data-dir", str(tmp_path / "gateway"), "--bus-url", server.url, "--token", "bcp-gateway-token"],
        ready="bcp gateway serving",
    )

    async def main() -> None:
        deliveries: asyncio.Queue[ResponseDelivery] = asyncio.Queue()
        failures: asyncio.Queue[QueryFailed] = asyncio.Queue()
        verdicts: asyncio.Queue[ValidationResult] = asyncio.Queue()
        listed: asyncio.Queue[list[ActiveSubscription]] = asyncio.Queue()
        queries: list[Query] = []

        async def on_query(q: Query) -> None:
            queries.append(q)
            # The answer is built from the spec's keys; its raw spacing and
            # case are the gateway's to normalize.
            await q.respond({key: "  Jane SMITH" for key in q.keys()})

        async with Bus(server.url, client_id="main", token="main-token") as main_bus, Bus(
            server.url, client_id="researcher", token="researcher-token"
        ) as reader_bus:
            controller = Controller(main_bus)
            await main_bus.add_subscription(main_bus.agent_topic, controller.handler("bcp-gateway", on_delivery=deliveries.put, on_failure=failures.put))
            reader = Reader(reader_bus)
            await reader_bus.add_subscription(
                reader_bus.agent_topic, reader.handler("bcp-gateway", on_query=on_query, on_result=verdicts.put, on_subscriptions=listed.put)
            )
            subs = await asyncio.wait_for(listed.get(), 20)
            assert [(s.subscription_id, s.controller, s.spec["category"]) for s in subs] == [("alerts", "main", 1)]

            spec = b'{"category": 2, "questions": [{"id": "sender", "question": "Who sent it?", "max_words": 5, "expected_format": "person_name"}]}'
            query_id = await controller.query("researcher", spec)
            assert query_id.startswith("q-") and len(query_id) > 10

            d = await asyncio.wait_for(deliveries.get(), 20)
            assert (d.query_id, d.from_agent, d.category, d.response, d.taint) == (query_id, "researcher", 2, {"sender": "jane smith"}, "medium")
            (q,) = queries
            assert (q.query_id, q.controller, q.keys()) == (query_id, "main", ["sender"])
            v = await asyncio.wait_for(verdicts.get(), 20)
            assert v.success and v.query_id == query_id

            # The gateway refuses, and its code comes back.
            with pytest.raises(Refused) as refused:
                await controller.query("nobody", {"category": 1, "fields": [{"name": "x", "type": "boolean"}]})
            assert refused.value.code == "no_channel"
            with pytest.raises(Refused) as refused:
                await reader.respond("q-0000", {"sender": "x"})
            assert refused.value.code == "unknown_query"

            # A publish against the Controller's subscription.
            await reader.publish("main", "alerts", {"urgent": True})
            d = await asyncio.wait_for(deliveries.get(), 20)
            assert (d.subscription_id, d.response) == ("alerts", {"urgent": True})
            assert failures.empty()

    run(main())


def test_reader_waits_for_its_first_list() -> None:
    """A gateway message that overtakes the Reader's first
    bcp_subscriptions_active is answered should_retry; one from another
    sender is not processed."""
    from bub_bus import Delivery, Retry

    async def main() -> None:
        reader = Reader(Bus(client_id="researcher"))
        handle = reader.handler("bcp-gateway")

        def delivery(sender: str, payload: dict[str, Any]) -> Delivery:
            return Delivery("agent:researcher", "agent:researcher", "m-1", sender, payload, b"{}", 1, reader.bus)

        query = {"type": "bcp_query", "query_id": "q-1", "controller": "main", "category": 1, "spec": {}}
        with pytest.raises(Retry):
            await handle(delivery("bcp-gateway", query))
        assert not (await handle(delivery("main", query))).processed
        assert (await handle(delivery("bcp-gateway", {"type": "bcp_subscriptions_active", "subscriptions": []}))).processed
        assert (await handle(delivery("bcp-gateway", query))).processed

    run(main())
