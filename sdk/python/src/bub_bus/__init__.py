"""bub_bus: the Python SDK of bub-bus.

Connect with :class:`Bus` (``async with Bus.from_env() as bus``), subscribe
handlers with the ``@bus.subscribe(pattern)`` decorator, publish with
``await bus.send_message(topic, payload)``. The wire is docs/PROTOCOL.md;
the concepts are the Go SDK's (package ``peer``). BCP Readers and
Controllers are in :mod:`bub_bus.bcp`; answering A2A tasks (``bub serve
--a2a-config``) in :mod:`bub_bus.a2a`.
"""

from .bus import Bus, __version__
from .delivery import Ack, Delivery, Handler, Limits, Policy, Reject, Result, Retry, SendResult
from .env import DEFAULT_BUS_URL, Env, agent_topic
from .errors import (
    BusError,
    CallTimeout,
    Closed,
    Code,
    Disconnected,
    HandlerError,
    MessageTooBig,
    Revoked,
    RPCError,
    TakenOver,
    Unauthorized,
)

__all__ = [
    "Ack",
    "Bus",
    "BusError",
    "CallTimeout",
    "Closed",
    "Code",
    "DEFAULT_BUS_URL",
    "Delivery",
    "Disconnected",
    "Env",
    "Handler",
    "HandlerError",
    "Limits",
    "MessageTooBig",
    "Policy",
    "RPCError",
    "Reject",
    "Result",
    "Retry",
    "Revoked",
    "SendResult",
    "TakenOver",
    "Unauthorized",
    "__version__",
    "agent_topic",
]
