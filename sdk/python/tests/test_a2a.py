"""bub_bus.a2a against a real bub serve --a2a-config: a Python agent
answers A2A tasks with status updates and artifacts, and an A2A client
(plain HTTP here) sees them."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TIMEOUT, BusServer, run

from bub_bus import Bus, Delivery, Result
from bub_bus.a2a import AnswerRefused, Task, send_artifact, send_direct_message, send_status, task_of

A2A_CONFIG = """
agents:
  - name: writer
    description: Writes drafts.
    topic: tg:a2a-writer
    client_id: a2a-gw
"""


@pytest.fixture
def a2a_bus(start_bus: Callable[..., BusServer], tmp_path: Path) -> BusServer:
    """A bus without auth serving agent "writer" on tg:a2a-writer over A2A."""
    cfg = tmp_path / "a2a.yaml"
    cfg.write_text(A2A_CONFIG)
    return start_bus("--a2a-config", str(cfg))


def rpc(server: BusServer, method: str, params: dict[str, Any]) -> Any:
    """One JSON-RPC call to agent writer; returns the result, or fails
    on an error answer."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/a2a/writer",
        data=body,
        headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
    )
    with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
        answer = json.loads(resp.read())
    assert "error" not in answer, f"{method}: {answer['error']}"
    return answer["result"]


def user_message(message_id: str, text: str, task_id: str = "") -> dict[str, Any]:
    m: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id:
        m["taskId"] = task_id
    return {"message": m}


def test_agent_answers_with_status_and_artifacts(a2a_bus: BusServer) -> None:
    """Status updates, an artifact in two chunks and the completion reach
    the task in order; a second turn after input-required continues the
    same task; a direct message is what SendMessage answers."""
    seen: list[Task] = []

    async def main() -> None:
        async with Bus(a2a_bus.url, client_id="writer") as bus:

            @bus.subscribe("tg:a2a-writer")
            async def write(d: Delivery) -> Result:
                task = task_of(d)
                if task is None:
                    return Result(message="not an A2A task")
                seen.append(task)
                if task.message_id == "m-3":
                    await send_direct_message(d.bus, task, "just this")
                elif task.message_id == "m-1":
                    await send_status(d.bus, task, "working", "drafting")
                    await send_artifact(d.bus, task, {"artifactId": "draft", "parts": [{"text": "Dear "}]}, last_chunk=False)
                    await send_artifact(d.bus, task, {"artifactId": "draft", "parts": [{"text": "Sir"}]}, append=True)
                    await send_status(d.bus, task, "TASK_STATE_INPUT_REQUIRED", "which tone?")
                else:
                    await send_status(d.bus, task, "completed", message={"role": "ROLE_AGENT", "messageId": "a-2", "parts": [{"text": "done: " + task.text}]})
                return Result(processed=True)

            # On a connected Bus the decorator subscribes in the background:
            # a task sent before the bus has it finds no agent.
            await bus.subscriptions_ready()
            first = (await asyncio.to_thread(rpc, a2a_bus, "SendMessage", user_message("m-1", "a letter")))["task"]
            assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            assert first["status"]["message"]["parts"] == [{"text": "which tone?"}]
            assert first["artifacts"] == [{"artifactId": "draft", "parts": [{"text": "Dear "}, {"text": "Sir"}]}]

            second = (await asyncio.to_thread(rpc, a2a_bus, "SendMessage", user_message("m-2", "warm", first["id"])))["task"]
            assert second["id"] == first["id"]
            assert second["status"]["state"] == "TASK_STATE_COMPLETED"
            assert second["status"]["message"]["parts"] == [{"text": "done: warm"}]

            direct = (await asyncio.to_thread(rpc, a2a_bus, "SendMessage", user_message("m-3", "quick")))["message"]
            assert direct["role"] == "ROLE_AGENT" and direct["parts"] == [{"text": "just this"}]

    run(main())
    assert [(t.message_id, t.text, t.agent, t.caller) for t in seen][:2] == [("m-1", "a letter", "writer", ""), ("m-2", "warm", "writer", "")]
    assert seen[0].task_id == seen[1].task_id and seen[0].context_id == seen[1].context_id
    assert seen[0].reply_to == "outbound:a2a-" + seen[0].task_id


def test_refused_answers(a2a_bus: BusServer) -> None:
    """An answer to a task the A2A server does not hold is refused; a
    bad state never leaves the agent; a delivery that is no A2A task
    reads as None."""

    async def main() -> None:
        got: asyncio.Queue[Delivery] = asyncio.Queue()
        async with Bus(a2a_bus.url, client_id="writer") as bus:

            async def note(d: Delivery) -> Result:
                await got.put(d)
                return Result(processed=True)

            await bus.add_subscription("notes:*", note)
            await bus.send_message("notes:1", {"type": "plaintext_message", "text": "hi", "reply_to": "outbound:a2a-x"})
            assert task_of(await asyncio.wait_for(got.get(), TIMEOUT)) is None

            ghost = Task(task_id="no-such-task", context_id="c", agent="writer", caller="", text="", reply_to="outbound:a2a-no-such-task")
            with pytest.raises(AnswerRefused) as refused:
                await send_status(bus, ghost, "completed", "late")
            assert refused.value.task_id == "no-such-task" and "no-such-task" in str(refused.value)
            with pytest.raises(ValueError, match="state 'done'"):
                await send_status(bus, ghost, "done")
            with pytest.raises(ValueError, match="a text or a message"):
                await send_direct_message(bus, ghost)
            with pytest.raises(ValueError, match="parts"):
                await send_artifact(bus, ghost, {"artifactId": "a"})

    run(main())
