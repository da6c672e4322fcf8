"""BCP for agents: a Controller that queries Readers through the gateway,
and a Reader that answers and publishes (docs/BCP.md, section 11).

The helpers only build and read the documented messages; they enforce
nothing. The gateway validates every spec and answer, and the bus's
grants keep a Reader from reaching its Controller any other way::

    controller = Controller(bus)               # bus.client_id is the Controller's name
    bus.subscribe(bus.agent_topic)(controller.handler("bcp-gateway", on_delivery=..., on_failure=...))
    query_id = await controller.query("researcher", {"category": 1, "fields": [...]})

    reader = Reader(bus)
    async def on_query(q: Query) -> None:
        await q.respond({name: answer(name) for name in q.keys()})
    bus.subscribe(bus.agent_topic)(reader.handler("bcp-gateway", on_query=on_query))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import wire
from .bus import Bus
from .delivery import Delivery, Handler, Result, Retry
from .errors import BusError

TOPIC_QUERY = "bcp:query"
"""Where Controllers send bcp_query_request and bcp_session_start."""
TOPIC_RESPONSE = "bcp:response"
"""Where Readers send bcp_response."""
TOPIC_APPROVAL = "bcp:approval"
"""Where approvers send decisions."""


def approval_topic(approver: str) -> str:
    """The topic on which the gateway sends approver its approval requests
    and closings, ``bcp:approval.requested.{approver}``."""
    return "bcp:approval.requested." + approver


class Refused(BusError):
    """The gateway refused a query, answer or publish. ``code`` is the
    refusal's code (budget_exhausted, unknown_query, too_many_words, ...;
    docs/BCP.md section 11), ``message`` the gateway's whole ack message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"bcp: refused: {message}")
        self.code = code
        self.message = message


class NoGateway(BusError):
    """No gateway handled the message: it is not running, or not
    subscribed to the topic."""


async def _send(bus: Bus, topic: str, payload: str) -> str:
    """Publishes payload (JSON text) and turns the gateway's ack into a
    Refused or NoGateway error; returns the ack's message."""
    result = await bus.send_message(topic, payload)
    if not result.acks or result.acks[0].error:
        why = result.acks[0].error if result.acks else result.reason
        raise NoGateway(f"bcp: no gateway answered on {topic} ({why})")
    ack = result.acks[0]
    if not ack.processed:
        code, _, _ = ack.message.partition(":")
        raise Refused(code, ack.message)
    return ack.message


def query_id_of(ack_message: str) -> str:
    """The query id an accepted bcp_query_request's ack names
    (``queued: query_id=q-…, 55.0 bits charged, …``), or ""."""
    _, found, rest = ack_message.partition("query_id=")
    return rest.partition(",")[0].strip() if found else ""


def _envelope(head: Mapping[str, Any], body: wire.JSONValue, what: str) -> str:
    return wire.splice(head, wire.encode_object(body, what))


# --- Controller ------------------------------------------------------------


@dataclass(frozen=True)
class ResponseDelivery:
    """A validated answer (query_id) or publish (subscription_id), as the
    gateway delivers it: the normalized response only."""

    category: int
    from_agent: str
    response: dict[str, Any]
    """The flat response, keys in the spec's order."""
    bandwidth_bits: float
    taint: str
    anomalies: list[dict[str, Any]]
    query_id: str = ""
    subscription_id: str = ""


@dataclass(frozen=True)
class QueryFailed:
    """A query that will not be answered: a code, never a detail."""

    query_id: str
    code: str


class Controller:
    """Asks Readers through the gateway; the Bus's client_id is the
    Controller's agent name."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def query(self, reader: str, spec: wire.JSONValue, *, justification: str = "") -> str:
        """Sends a query (a spec of docs/BCP.md section 1, as a mapping or
        raw JSON bytes, written as given) to reader and returns its id, the
        random ``q-…`` the gateway names in its ack. The answer comes to
        the handler later. A Category-3 query needs a justification. Raises
        Refused (its code says why) or NoGateway."""
        head = {"type": "bcp_query_request", "target": reader}
        if justification:
            head["justification"] = justification
        message = await _send(self.bus, TOPIC_QUERY, _envelope(head, spec, f"query to {reader}: spec"))
        return query_id_of(message)

    async def start_session(self) -> None:
        """Starts a new session: the gateway resets the Controller's
        budgets."""
        await _send(self.bus, TOPIC_QUERY, '{"type":"bcp_session_start"}')

    def handler(
        self,
        gateway_id: str,
        *,
        on_delivery: Callable[[ResponseDelivery], Awaitable[None]] | None = None,
        on_failure: Callable[[QueryFailed], Awaitable[None]] | None = None,
    ) -> Handler:
        """The handler to subscribe to ``agent:{controller}``. It trusts
        only messages from gateway_id (as the bus attests the sender);
        anything else is answered not processed."""

        async def handle(d: Delivery) -> Result:
            if d.sender != gateway_id:
                return Result(message="not from the BCP gateway")
            p = d.payload
            if d.type == "bcp_response_delivery":
                if on_delivery is not None:
                    await on_delivery(
                        ResponseDelivery(
                            category=int(p.get("category", 0)),
                            from_agent=str(p.get("from_agent", "")),
                            response=dict(p.get("response") or {}),
                            bandwidth_bits=float(p.get("bandwidth_bits", 0)),
                            taint=str(p.get("taint", "")),
                            anomalies=list(p.get("anomalies") or []),
                            query_id=str(p.get("query_id", "")),
                            subscription_id=str(p.get("subscription_id", "")),
                        )
                    )
            elif d.type == "bcp_query_failed":
                if on_failure is not None:
                    await on_failure(QueryFailed(query_id=str(p.get("query_id", "")), code=str(p.get("code", ""))))
            else:
                return Result(message="not a BCP message: " + d.type)
            return Result(processed=True)

        return handle


# --- Reader ----------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """A bcp_query the gateway sent a Reader, with the spec to answer."""

    query_id: str
    controller: str
    category: int
    spec: dict[str, Any]
    expires_at: str
    reader: Reader = field(repr=False)

    def keys(self) -> list[str]:
        """The keys of a flat response to this spec, in its order: the
        fields' names (Category 1), the questions' ids (Category 2), or
        ``summary`` (Category 3)."""
        if self.category == 1:
            return [str(f.get("name", "")) for f in self.spec.get("fields", []) if isinstance(f, dict)]
        if self.category == 2:
            return [str(q.get("id", "")) for q in self.spec.get("questions", []) if isinstance(q, dict)]
        return ["summary"]

    async def respond(self, response: wire.JSONValue) -> str:
        """Answers this query; see Reader.respond."""
        return await self.reader.respond(self.query_id, response)


@dataclass(frozen=True)
class ValidationResult:
    """The gateway's verdict on an answer or publish, for the Reader only
    (the detail may quote it)."""

    success: bool
    code: str
    detail: str
    query_id: str = ""
    subscription_id: str = ""


@dataclass(frozen=True)
class ActiveSubscription:
    """One entry of bcp_subscriptions_active: a Controller's subscription
    this Reader may publish against, and its spec."""

    subscription_id: str
    controller: str
    spec: dict[str, Any]
    max_pushes_per_hour: int = 0


class Reader:
    """Answers queries and publishes through the gateway."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.subscriptions: list[ActiveSubscription] = []
        """The subscriptions the gateway last said are active."""
        self._listed = False

    async def respond(self, query_id: str, response: wire.JSONValue) -> str:
        """Answers a query with response, in either shape of docs/BCP.md
        section 2 (a mapping, or raw JSON bytes written as given). Returns
        the gateway's status, or raises Refused whose code is the
        validator's (the answer may be sent again until the attempts run
        out)."""
        head = {"type": "bcp_response", "query_id": query_id}
        return await _send(self.bus, TOPIC_RESPONSE, _with_response(head, response))

    async def publish(self, controller: str, subscription_id: str, response: wire.JSONValue) -> str:
        """Publishes response against controller's subscription."""
        head = {"type": "bcp_response", "subscription_id": subscription_id, "controller": controller}
        return await _send(self.bus, TOPIC_RESPONSE, _with_response(head, response))

    def handler(
        self,
        gateway_id: str,
        *,
        on_query: Callable[[Query], Awaitable[None]] | None = None,
        on_result: Callable[[ValidationResult], Awaitable[None]] | None = None,
        on_subscriptions: Callable[[list[ActiveSubscription]], Awaitable[None]] | None = None,
    ) -> Handler:
        """The handler to subscribe to ``agent:{reader}``. It trusts only
        messages from gateway_id. The gateway sends the active
        subscriptions before anything else; a message that overtakes the
        first list anyway is answered should_retry, so that the bus brings
        it again after the list (docs/BCP.md, "Known limitations")."""

        async def handle(d: Delivery) -> Result:
            if d.sender != gateway_id:
                return Result(message="not from the BCP gateway")
            if not self._listed and d.type != "bcp_subscriptions_active":
                raise Retry("waiting for bcp_subscriptions_active", after=1.0)
            p = d.payload
            if d.type == "bcp_query":
                spec = p.get("spec")
                if on_query is not None:
                    await on_query(
                        Query(
                            query_id=str(p.get("query_id", "")),
                            controller=str(p.get("controller", "")),
                            category=int(p.get("category", 0)),
                            spec=spec if isinstance(spec, dict) else {},
                            expires_at=str(p.get("expires_at", "")),
                            reader=self,
                        )
                    )
            elif d.type == "bcp_validation_result":
                if on_result is not None:
                    await on_result(
                        ValidationResult(
                            success=bool(p.get("success", False)),
                            code=str(p.get("code", "")),
                            detail=str(p.get("detail", "")),
                            query_id=str(p.get("query_id", "")),
                            subscription_id=str(p.get("subscription_id", "")),
                        )
                    )
            elif d.type == "bcp_subscriptions_active":
                self.subscriptions = [_active(e) for e in p.get("subscriptions") or [] if isinstance(e, dict)]
                self._listed = True
                if on_subscriptions is not None:
                    await on_subscriptions(list(self.subscriptions))
            else:
                return Result(message="not a BCP message: " + d.type)
            return Result(processed=True)

        return handle


def _with_response(head: Mapping[str, Any], response: wire.JSONValue) -> str:
    """head as JSON with a last member "response": the response object,
    written as given."""
    text = wire.dumps(dict(head))
    return text[:-1] + ',"response":' + wire.encode_object(response, "response") + "}"


def _active(entry: dict[str, Any]) -> ActiveSubscription:
    spec = {k: v for k, v in entry.items() if k not in ("subscription_id", "controller", "max_pushes_per_hour")}
    return ActiveSubscription(
        subscription_id=str(entry.get("subscription_id", "")),
        controller=str(entry.get("controller", "")),
        spec=spec,
        max_pushes_per_hour=int(entry.get("max_pushes_per_hour") or 0),
    )
