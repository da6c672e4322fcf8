"""Answering A2A tasks from a Python agent.

``bub serve --a2a-config`` makes the bus's agents A2A agents: each A2A
``SendMessage`` reaches the agent as a bus message on its topic, and the
agent answers on the message's ``reply_to`` (docs/A2A.md, "Task ↔ bus
message" and "The agent's answers"). A chat reply (a payload with a
``text``) completes the task; these helpers give the rest, as the Go
SDK's ``a2a.TaskOf``, ``a2a.SendStatus`` and ``a2a.SendArtifact`` do, with
the same payloads (:func:`send_direct_message` is ``a2a.SendDirectMessage``)::

    @bus.subscribe("tg:a2a-writer")
    async def write(d: Delivery) -> Result:
        task = task_of(d)
        if task is None:
            return Result(message="not an A2A task")
        await send_status(d.bus, task, "working", "drafting")
        await send_artifact(d.bus, task, {"artifactId": "draft", "parts": [{"text": "..."}]})
        await send_status(d.bus, task, "completed")
        return Result(processed=True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import BusError

if TYPE_CHECKING:
    from .bus import Bus
    from .delivery import Delivery, SendResult

TYPE_STATUS = "a2a_status"
"""An answer that moves the task to a state, with an optional agent
message: ``{"type": "a2a_status", "state": "working", "text": "..."}``."""
TYPE_ARTIFACT = "a2a_artifact"
"""An answer that adds an artifact, or a chunk of one:
``{"type": "a2a_artifact", "artifact": {...}, "append": false, "lastChunk": true}``."""
TYPE_MESSAGE = "a2a_message"
"""An answer with a message rather than a task:
``{"type": "a2a_message", "text": "..."}``; the task completes with it and
the caller's blocking SendMessage gets the message itself."""
TYPE_CANCEL = "a2a_cancel"
"""What the A2A server publishes on the agent's topic when a caller
cancels a task; the task is canceled already."""

STATES = frozenset({"working", "input-required", "auth-required", "completed", "failed", "rejected", "canceled"})
"""The states an agent may move its task to. The A2A names
(``TASK_STATE_INPUT_REQUIRED``) are taken too."""


class AnswerRefused(BusError):
    """The A2A server did not take an answer: the task is unknown (it
    expired, or never was), or the answer was bad; the bus dead-lettered
    it. ``task_id`` names the task."""

    def __init__(self, task_id: str, why: str) -> None:
        super().__init__(f"a2a: answer refused: task {task_id}: {why}")
        self.task_id = task_id


@dataclass(frozen=True)
class Task:
    """The A2A side of a delivery the A2A server published
    (docs/A2A.md, "Task ↔ bus message")."""

    task_id: str
    """The A2A task id; the bus message's ``correlation_id``."""
    context_id: str
    """The A2A context id; the bus message's ``conversation_id``."""
    agent: str
    """The agent's name in the A2A configuration, as the caller addressed it."""
    caller: str
    """Who sent the message, as the bus's auth names it ("" on a bus without auth)."""
    text: str
    """The message's text parts, joined by newlines."""
    reply_to: str
    """Where the answers go: ``outbound:a2a-{task_id}``."""
    message: dict[str, Any] = field(default_factory=dict)
    """The whole A2A message: ``messageId``, ``parts`` (text, files, data), ``metadata``."""

    @property
    def message_id(self) -> str:
        """The A2A message's ``messageId``."""
        value = self.message.get("messageId")
        return value if isinstance(value, str) else ""


def task_of(d: Delivery) -> Task | None:
    """Reads the A2A task from a delivery, or None for a message that is
    not one the A2A server published."""
    p = d.payload
    a2a = p.get("a2a")
    if not isinstance(a2a, dict):
        return None
    task_id = a2a.get("taskId")
    if not isinstance(task_id, str) or not task_id or p.get("reply_to") != "outbound:a2a-" + task_id:
        return None
    message = a2a.get("message")
    return Task(
        task_id=task_id,
        context_id=_str(a2a.get("contextId")),
        agent=_str(a2a.get("agent")),
        caller=_str(a2a.get("caller")),
        text=_str(p.get("text")),
        reply_to=p["reply_to"],
        message=message if isinstance(message, dict) else {},
    )


async def send_status(bus: Bus, task: Task, state: str, text: str = "", *, message: dict[str, Any] | None = None) -> None:
    """Moves task to state (one of :data:`STATES`) with text, or a whole
    A2A message, as the agent's message ("" and None: none). Raises
    :class:`AnswerRefused` when the A2A server did not take it, and
    ValueError for a state that is not one."""
    name = state.lower().removeprefix("task_state_").replace("_", "-")
    if name not in STATES:
        raise ValueError(f"send_status: state {state!r}: want one of {', '.join(sorted(STATES))}")
    answer: dict[str, Any] = {"type": TYPE_STATUS, "state": name}
    if text:
        answer["text"] = text
    if message is not None:
        answer["message"] = message
    await _answer(bus, task, answer)


async def send_direct_message(bus: Bus, task: Task, text: str = "", *, message: dict[str, Any] | None = None) -> None:
    """Answers task's message with a message rather than a task (text as
    its one part, or a whole A2A message): the task completes with it, and
    the caller's blocking SendMessage gets the message itself. Raises
    :class:`AnswerRefused` when the A2A server did not take it."""
    if not text and message is None:
        raise ValueError("send_direct_message: give a text or a message")
    answer: dict[str, Any] = {"type": TYPE_MESSAGE}
    if text:
        answer["text"] = text
    if message is not None:
        answer["message"] = message
    await _answer(bus, task, answer)


async def send_artifact(bus: Bus, task: Task, artifact: dict[str, Any], *, append: bool = False, last_chunk: bool = True) -> None:
    """Adds artifact (``{"artifactId": ..., "parts": [...]}``) to task, or
    with append adds its parts to the artifact of the same id; last_chunk
    says it is the artifact's last chunk. Raises :class:`AnswerRefused`
    when the A2A server did not take it."""
    if not artifact.get("parts"):
        raise ValueError('send_artifact: the artifact needs "parts"')
    await _answer(bus, task, {"type": TYPE_ARTIFACT, "artifact": artifact, "append": append, "lastChunk": last_chunk})


async def _answer(bus: Bus, task: Task, answer: dict[str, Any]) -> None:
    """Publishes answer on task's reply topic and checks that the A2A
    server took it, or that the bus keeps it for an A2A server that is
    away."""
    res: SendResult = await bus.send_message(task.reply_to, answer)
    for ack in res.acks:
        if ack.processed or ack.held or ack.retrying:
            return
        if ack.dead_letter:
            raise AnswerRefused(task.task_id, ack.message)
    if res.held:
        return
    raise AnswerRefused(task.task_id, f"no A2A server took the answer on {task.reply_to}")


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
