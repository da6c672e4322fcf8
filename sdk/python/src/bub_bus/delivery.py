"""What a handler gets (:class:`Delivery`) and what it answers
(:class:`Result`, or :class:`Retry` or :class:`Reject` raised)."""

from __future__ import annotations

import enum
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bus import Bus


class Policy(str, enum.Enum):
    """Propagation policies (docs/PROTOCOL.md, "Propagation policies"):
    after a subscriber answers, whether the message goes on to older
    matching subscriptions."""

    STOP_ON_PROCESSED = "stopPropagationOnProcessed"
    """Stop when the subscriber processed it or asked to stop (the bus's
    default, unless started with another)."""
    STOP_ON_STOP = "stopPropagationOnStop"
    """Stop only when the subscriber asked to (``stop_propagation``)."""
    CONTINUE_ALL = "continueAll"
    """Never stop; observers of system events use it."""


@dataclass(frozen=True)
class Delivery:
    """One message as the bus delivered it to a subscription."""

    topic: str
    """The topic the message was published to."""
    subscription: str
    """The pattern whose subscription matched."""
    message_id: str
    """The bus's id of the message; a redelivery keeps it."""
    sender: str
    """The publisher's clientId, as the bus attests it (the wire's
    ``from``), never taken from the payload."""
    payload: dict[str, Any]
    """The payload, decoded; its keys are in the publisher's order."""
    raw_payload: bytes
    """The payload as the publisher wrote it, byte for byte: what to pass
    on when forwarding it."""
    attempt: int
    """Counts deliveries of this message to this subscriber, from 1."""
    bus: Bus
    """The Bus the message came on; a handler replies through it."""
    meta: dict[str, Any] | None = None
    """The publisher's meta object (traceparent, tracestate), or None."""
    raw_meta: bytes | None = None
    """The meta object as the publisher wrote it, or None."""

    @property
    def type(self) -> str:
        """The payload's ``type``, or "" when it has none."""
        value = self.payload.get("type")
        return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class Result:
    """A handler's answer to a delivery, which the bus relays to the
    publisher in the message's ack and which its propagation policy
    reads."""

    processed: bool = False
    """The handler handled the message. Under the default policy it stops
    the message from going on to older matching subscriptions."""
    stop_propagation: bool = False
    """Stops the message from going on to older matching subscriptions,
    under every policy but continueAll."""
    should_retry: bool = False
    """Asks the bus to deliver the message again after retry_after."""
    retry_after: float = 0.0
    """The delay should_retry asks for, in seconds; 0 leaves it to the
    bus's backoff."""
    reject: bool = False
    """Refuses the message for good, on any attempt, the first included:
    the bus puts it in the dead-letter queue at once, with reason
    "rejected" and message as the reason given, unless another subscriber
    handled it (docs/PROTOCOL.md, "Final refusal"). It outweighs
    should_retry and is ignored with processed. Use it for a message that
    can never succeed here (a chat that blocked the bot, a payload this
    handler cannot take), so an operator finds it rather than the
    publisher alone."""
    message: str = ""
    """A human-readable status, relayed in the ack; with reject, the reason
    the dead letter records."""

    def __post_init__(self) -> None:
        _check_retry_after(self.retry_after)

    def wire(self) -> dict[str, Any]:
        """The processMessage result that carries this answer."""
        return {
            "processed": self.processed,
            "should_retry": self.should_retry,
            "retry_seconds": self.retry_after,
            "reject": self.reject,
            "message": self.message,
            "stopPropagation": self.stop_propagation,
        }


def _check_retry_after(seconds: float) -> None:
    """Refuses a retry delay JSON cannot carry: json.dumps would write NaN
    or Infinity, which is not JSON, and the bus would drop the answer."""
    if not math.isfinite(seconds):
        raise ValueError(f"retry_after {seconds!r}: want a finite number of seconds (0: the bus's backoff)")


class Retry(Exception):
    """Raised by a handler that could not handle the message now: answered
    as ``Result(should_retry=True, retry_after=after, message=...)``.

    Any other exception but :class:`Reject` is answered as a JSON-RPC
    error, which the bus records as a failed delivery and retries with its
    own backoff."""

    def __init__(self, message: str = "", after: float = 0.0) -> None:
        super().__init__(message)
        _check_retry_after(after)
        self.after = after

    def result(self) -> Result:
        """The Result this exception stands for."""
        return Result(should_retry=True, retry_after=self.after, message=str(self))


class Reject(Exception):
    """Raised by a handler that knows the message can never succeed here:
    answered as ``Result(reject=True, message=...)``, so the bus
    dead-letters it at once with the message as its reason, on any
    attempt (docs/PROTOCOL.md, "Final refusal")."""

    def result(self) -> Result:
        """The Result this exception stands for."""
        return Result(reject=True, message=str(self))


Handler = Callable[[Delivery], Awaitable[Result]]
"""An async function that handles the deliveries of one subscription."""


@dataclass(frozen=True)
class Ack:
    """One subscriber's answer to a sendMessage, in delivery order."""

    client_id: str
    subscription: str
    processed: bool
    message: str = ""
    stop_propagation: bool = False
    error: str = ""
    """Set when the delivery got no answer (timeout, disconnected, ...)."""
    retrying: bool = False
    """A retry is scheduled for this subscriber."""
    attempt: int = 0
    next_attempt: str = ""
    held: bool = False
    """The subscriber is a durable subscriber that is away: the message is
    held for it (next_attempt: when its hold lifetime ends)."""
    dead_letter: str = ""
    """The id of the dead letter the bus made of this delivery when the
    subscriber rejected it (for ``dlq.get``); "" otherwise, and when the
    dead-letter queue was full (``error`` then says "not dead-lettered
    yet")."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Members this version of the SDK does not name."""

    @classmethod
    def from_wire(cls, m: dict[str, Any]) -> Ack:
        """Reads one ack of a sendMessage result."""
        known = {"client_id", "subscription", "processed", "message", "stopPropagation", "error", "retrying", "attempt", "next_attempt", "held", "dead_letter"}
        return cls(
            client_id=str(m.get("client_id", "")),
            subscription=str(m.get("subscription", "")),
            processed=bool(m.get("processed", False)),
            message=str(m.get("message", "")),
            stop_propagation=bool(m.get("stopPropagation", False)),
            error=str(m.get("error", "")),
            retrying=bool(m.get("retrying", False)),
            attempt=int(m.get("attempt", 0)),
            next_attempt=str(m.get("next_attempt", "")),
            held=bool(m.get("held", False)),
            dead_letter=str(m.get("dead_letter", "")),
            extra={k: v for k, v in m.items() if k not in known},
        )


@dataclass(frozen=True)
class SendResult:
    """The result of sendMessage: the acks of every subscriber in the
    routing chain (docs/PROTOCOL.md, "sendMessage")."""

    success: bool
    """The message was routed to at least one subscriber."""
    message_id: str
    acks: list[Ack]
    reason: str = ""
    """"no_subscribers" when no subscription matched."""
    held: bool = False
    """The bus holds the message for a subscriber to come."""
    next_attempt: str = ""

    @classmethod
    def from_wire(cls, m: dict[str, Any]) -> SendResult:
        """Reads a sendMessage result."""
        acks = m.get("acks") or []
        return cls(
            success=bool(m.get("success", False)),
            message_id=str(m.get("messageId", "")),
            acks=[Ack.from_wire(a) for a in acks if isinstance(a, dict)],
            reason=str(m.get("reason", "")),
            held=bool(m.get("held", False)),
            next_attempt=str(m.get("next_attempt", "")),
        )


@dataclass(frozen=True)
class Limits:
    """The bounds the bus announced at initialize; 0 means it did not
    say."""

    max_message_bytes: int = 0
    """The largest WebSocket message the bus reads, the whole request
    included."""
    delivery_timeout: float = 0.0
    """How long, in seconds, the bus waits for a subscriber's answer."""

    @classmethod
    def from_wire(cls, m: Any) -> Limits:
        """Reads initialize's limits member."""
        if not isinstance(m, dict):
            return cls()
        return cls(
            max_message_bytes=int(m.get("maxMessageBytes") or 0),
            delivery_timeout=float(m.get("deliveryTimeoutMs") or 0) / 1000,
        )

