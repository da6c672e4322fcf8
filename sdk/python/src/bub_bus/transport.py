"""The WebSocket under a Bus, over whichever client API the installed
``websockets`` has: the asyncio implementation of 13.0 and later, else the
one Debian 12 ships with 10.4 (``websockets.client``). Their keyword for
the upgrade's headers and their exceptions differ; nothing else here
does."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Protocol, cast

import websockets.exceptions


class Socket(Protocol):
    """The part of a websockets connection a Bus uses."""

    async def send(self, message: str) -> None: ...

    async def recv(self) -> str | bytes: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


def _connect_api() -> tuple[Any, str]:
    """The connect function and its keyword for extra upgrade headers."""
    if importlib.util.find_spec("websockets.asyncio") is not None:
        module = importlib.import_module("websockets.asyncio.client")
        return module.connect, "additional_headers"
    module = importlib.import_module("websockets.client")
    return module.connect, "extra_headers"


_connect, _headers_keyword = _connect_api()

ConnectionClosed = websockets.exceptions.ConnectionClosed
"""Raised by recv and send once the connection is closed."""

WebSocketError = websockets.exceptions.WebSocketException
"""The base of what websockets raises: a refused or failed handshake,
a closed connection."""


async def dial(url: str, token: str, max_size: int, open_timeout: float) -> Socket:
    """Opens the WebSocket to url, with the token as ``Authorization:
    Bearer`` when there is one. Raises what websockets raises; see
    :func:`http_status` for a refused upgrade."""
    kwargs: dict[str, Any] = {"max_size": max_size, "open_timeout": open_timeout, "close_timeout": 5}
    if token:
        kwargs[_headers_keyword] = [("Authorization", "Bearer " + token)]
    return cast(Socket, await _connect(url, **kwargs))


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of an upgrade the server refused, or None."""
    status = getattr(exc, "status_code", None)  # websockets < 14
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def close_code(exc: BaseException) -> int | None:
    """The close status the peer sent, from a ConnectionClosed, or None."""
    received = getattr(exc, "rcvd", None)
    code = getattr(received, "code", None)
    return code if isinstance(code, int) else None
