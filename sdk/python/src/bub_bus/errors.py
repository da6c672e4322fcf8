"""The SDK's error vocabulary.

Errors the bus answers are :class:`RPCError` values carrying the JSON-RPC
code (docs/PROTOCOL.md, "Error codes"); conditions on the client side are
the other classes here. Every class derives from :class:`BusError`.
"""

from __future__ import annotations

import enum
from typing import Any


class Code(enum.IntEnum):
    """The JSON-RPC error codes of docs/PROTOCOL.md."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    ALREADY_INITIALIZED = -32001
    INVALID_CLIENT_INFO = -32002
    ALREADY_SUBSCRIBED = -32003
    SUBSCRIPTION_NOT_FOUND = -32004
    NOT_INITIALIZED = -32005
    TOO_MANY_REQUESTS = -32006
    SHUTTING_DOWN = -32007
    NOT_FOUND = -32008
    UNAUTHORIZED = -32009
    FORBIDDEN = -32010
    LIMIT_REACHED = -32011
    RATE_LIMITED = -32012


class BusError(Exception):
    """The base of every error the SDK raises."""


class RPCError(BusError):
    """The bus answered a call with a JSON-RPC error.

    ``code`` is the error code (compare it with :class:`Code`), ``message``
    the bus's text, which names what was wrong, and ``data`` the error's
    data member, if any (``{"retry_after_ms": N}`` for -32012).
    """

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: bus answered {code}: {message}")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


class Disconnected(BusError):
    """The Bus has no connection to the bus: the call was not sent, or the
    connection dropped before its answer came, so whether the bus acted on
    it is unknown. While the Bus reconnects a later call may succeed."""


class Closed(BusError):
    """The Bus was closed, or ended for good (see :attr:`Bus.ended`); it
    cannot be used again."""


class CallTimeout(BusError, TimeoutError):
    """The bus did not answer within the call's timeout."""


class MessageTooBig(BusError):
    """``send_message`` refused a message larger than the bus's announced
    ``maxMessageBytes`` without sending it: the bus would have closed the
    connection with 1009 and no answer."""


class Unauthorized(BusError):
    """The bus did not accept the credential: HTTP 401 on the WebSocket
    upgrade, or -32009 to ``initialize``. The token is missing, unknown,
    expired or revoked; the bus's log says which, the peer is not told."""


class TakenOver(Closed):
    """The bus closed the connection (status 4001) because a newer
    connection initialized with the same clientId. The Bus does not
    reconnect, which would only take the identity back and forth."""


class Revoked(Closed):
    """The bus closed the connection (status 4003 or 4004) because, after a
    reload of its configuration, the credential is no longer accepted or no
    longer allows the clientId or a subscription. Reconnecting with the same
    credential would be refused, so the Bus does not."""


class HandlerError(BusError):
    """A handler's answer could not be given: it returned something other
    than a :class:`Result`. Reported to the bus as a failed delivery."""
