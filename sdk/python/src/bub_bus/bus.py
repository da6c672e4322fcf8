"""The Bus: one client identity on the bus, kept connected across drops."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from . import transport, wire
from .delivery import Delivery, Handler, Limits, Policy, Reject, Result, Retry, SendResult
from .env import DEFAULT_BUS_URL, Env, agent_topic, split_urls
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

__version__ = "0.1.0"

_log = logging.getLogger("bub_bus")

# WebSocket close statuses of docs/PROTOCOL.md after which reconnecting
# is wrong: a newer connection took the clientId, or the credential was
# revoked or narrowed.
_CLOSE_TAKEN_OVER = 4001
_CLOSE_REVOKED = (4003, 4004)

# The default delivery timeout of bub serve, assumed of a bus that
# announces none.
_DEFAULT_DELIVERY_TIMEOUT = 30.0

# What the JSON-RPC envelope adds to sendMessage's params:
# {"jsonrpc":"2.0","id":N,"method":"sendMessage","params":} with a 20-digit
# id. Erring high only refuses a message within a few bytes of the limit.
_REQUEST_OVERHEAD = 76

# How long a delivery refused for want of a handler slot asks to wait.
_BUSY_RETRY_AFTER = 1.0

H = TypeVar("H", bound=Handler)


@dataclass
class _Subscription:
    pattern: str
    handler: Handler
    policy: Policy | str | None
    fallback: bool
    durable: bool = False
    # When positive, this subscription's handlers run on a bound of their
    # own, apart from the Bus's max_concurrent_handlers; 0 for that
    # shared bound.
    max_concurrent_handlers: int = 0
    # Its handlers running, counted against its own bound.
    running: set[asyncio.Task[None]] = field(default_factory=set)

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"topic": self.pattern}
        if self.policy:
            p["policy"] = self.policy.value if isinstance(self.policy, Policy) else self.policy
        if self.fallback:
            p["fallback"] = True
        if self.durable:
            p["durable"] = True
        return p


@dataclass
class _Session:
    """One WebSocket connection and its initialize; a Bus has a new one
    after every reconnect."""

    socket: transport.Socket
    url: str
    pending: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    # The patterns subscribed on this connection.
    patterns: set[str] = field(default_factory=set)
    # The subscribes whose answer never came (the call timed out), by
    # pattern, with their params: the bus may have applied them.
    unsure: dict[str, dict[str, Any]] = field(default_factory=dict)
    server_id: str = ""
    # Why reading stopped: tells a takeover or revocation (close status)
    # from a dropped network.
    lost: BaseException | None = None
    reader: asyncio.Task[None] | None = None


class _Lost(Exception):
    """The connection ended before a call's answer came."""


class Bus:
    """A connection to the bus as one clientId, kept up across drops.

    Use it as an async context manager (``async with Bus(...) as bus``),
    which connects and, on exit, closes. Handlers registered with
    :meth:`subscribe` run as tasks of their own, several at once, never on
    the read loop, so a handler may itself call :meth:`send_message`.

    When the connection drops, the Bus reconnects with capped exponential
    backoff and jitter, trying the next address of the list first,
    initializes again with the same clientId and subscribes every pattern
    again in the order first subscribed. While disconnected, calls raise
    :class:`Disconnected` at once. It does not reconnect after
    :meth:`close`, after ``reconnect=False``, or after the bus closed it
    for a takeover (:class:`TakenOver`) or a revoked credential
    (:class:`Revoked`); :meth:`wait_closed` reports that end.

    Arguments (all but url keyword-only; defaults in brackets):

    - url: the bus's address, or several nodes of one bus comma-separated
      [ws://127.0.0.1:7892/].
    - client_id: the identity on the bus; two processes must not share
      one, or each takes the other over [``py-`` and random hex].
    - token: the credential, sent as ``Authorization: Bearer`` on the
      upgrade; never logged [none].
    - default_topic: where send_message goes when given no topic [none].
    - publish_only: publish without subscribing, and without taking over
      the connection that holds client_id [False].
    - client_name: the clientInfo name in the bus's logs [bub-bus-python].
    - call_timeout: bound of every call, in seconds; send_message waits at
      least the bus's delivery timeout plus 5 s [30].
    - handler_timeout: how long a handler may run before its delivery is
      answered as failed [the bus's delivery timeout less a tenth, and
      less at most a second: 29 s of 30 s].
    - max_concurrent_handlers: beyond it a delivery is answered
      should_retry at once, never queued; the handlers of a subscription
      with a bound of its own (subscribe's max_concurrent_handlers) are
      not counted [64].
    - reconnect: reconnect after a drop [True].
    - reconnect_min, reconnect_max: the backoff's first delay and cap, in
      seconds [0.1, 30].
    - max_message_bytes: the largest message read from the bus [4 MiB].
    - write_timeout: bound of one write, in seconds; a connection that
      cannot write within it is dropped [10].
    """

    def __init__(
        self,
        url: str = DEFAULT_BUS_URL,
        *,
        client_id: str | None = None,
        token: str = "",
        default_topic: str = "",
        publish_only: bool = False,
        client_name: str = "bub-bus-python",
        call_timeout: float = 30.0,
        handler_timeout: float | None = None,
        max_concurrent_handlers: int = 64,
        reconnect: bool = True,
        reconnect_min: float = 0.1,
        reconnect_max: float = 30.0,
        max_message_bytes: int = 4 << 20,
        write_timeout: float = 10.0,
    ) -> None:
        self._urls = split_urls(url)
        self._at = 0
        self.client_id = client_id or "py-" + secrets.token_hex(6)
        self.default_topic = default_topic
        self._token = token
        self._publish_only = publish_only
        self._client_name = client_name
        self.call_timeout = call_timeout
        self.handler_timeout = handler_timeout
        self._max_handlers = max(1, max_concurrent_handlers)
        self._reconnect = reconnect
        self._reconnect_min = reconnect_min
        self._reconnect_max = max(reconnect_max, reconnect_min)
        self._max_message_bytes = max_message_bytes
        self._write_timeout = write_timeout

        self._ids = itertools.count(1)
        self._session: _Session | None = None
        self._limits = Limits()
        self._subs: dict[str, _Subscription] = {}
        # Serializes subscribe, unsubscribe and re-subscription, so the bus
        # gets patterns in the order _subs lists them.
        self._sub_lock = asyncio.Lock()
        # Every running handler, for close; _shared holds those counted
        # against max_concurrent_handlers.
        self._handlers: set[asyncio.Task[None]] = set()
        self._shared: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._subscribe_errors: list[BaseException] = []
        self._supervisor: asyncio.Task[None] | None = None
        self._started = False
        self._ended: BaseException | None = None
        self._done = asyncio.Event()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Bus:
        """A Bus for the agent the environment describes (BUB_BUS_URL,
        BUB_AGENT_ID as client_id, BUB_TOKEN, BUB_DEFAULT_TOPIC); options
        given win. BUB_AGENT_ID is required unless client_id is given."""
        env = Env.from_environ(environ)
        options.setdefault("client_id", env.agent_id)
        options.setdefault("token", env.token)
        options.setdefault("default_topic", env.default_topic)
        if not options["client_id"]:
            raise ValueError("Bus.from_env: BUB_AGENT_ID is not set")
        return cls(env.bus_url, **options)

    # --- state -------------------------------------------------------------

    @property
    def agent_topic(self) -> str:
        """``agent:{client_id}``, where messages to this client go."""
        return agent_topic(self.client_id)

    @property
    def limits(self) -> Limits:
        """The bounds the bus announced at the latest initialize."""
        return self._limits

    @property
    def server_id(self) -> str:
        """The serverId of the bus connected to: the ``from`` of its own
        events; "" while disconnected."""
        return self._session.server_id if self._session else ""

    @property
    def connected(self) -> bool:
        """Whether the Bus has a connection now."""
        return self._session is not None

    @property
    def url(self) -> str:
        """The address the current or last connection used."""
        return self._urls[self._at]

    @property
    def ended(self) -> BaseException | None:
        """Why the Bus ended for good (Closed, TakenOver, Revoked, or the
        lost connection's Disconnected), or None while it has not."""
        return self._ended

    # --- lifecycle ---------------------------------------------------------

    async def __aenter__(self) -> Bus:
        await self.connect()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def connect(self) -> None:
        """Connects to the first address that answers, initializes, and
        subscribes the patterns registered so far. An address that cannot
        be reached is skipped; one that refuses (Unauthorized, an error
        answer) ends the attempt, since every node of a bus would refuse
        alike. Raises Disconnected when no address answered."""
        if self._started:
            raise BusError("connect: the Bus was connected already; make a new one")
        self._started = True
        last: BaseException | None = None
        for i, url in enumerate(self._urls):
            try:
                session = await asyncio.wait_for(self._establish(url), self.call_timeout)
            except (Unauthorized, RPCError):
                self._end(Closed("connect failed"))
                raise
            except (OSError, asyncio.TimeoutError, BusError, transport.WebSocketError) as e:
                # Not there, or not answering as a bus: the next node may.
                last = e
                continue
            self._at = i
            self._supervisor = asyncio.create_task(self._supervise(session))
            return
        self._end(Closed("connect failed"))
        raise Disconnected(f"connect: no address of {', '.join(self._urls)} answered: {last}") from last

    async def close(self) -> None:
        """Closes the connection with a normal WebSocket close, cancels
        running handlers and waits for them. Idempotent; calls after it
        raise Closed."""
        if self._ended is None:
            self._ended = Closed("the Bus was closed")
        session, self._session = self._session, None
        if self._supervisor is not None:
            self._supervisor.cancel()
        if session is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.socket.close(1000, "client closed"), self._write_timeout)
            if session.reader is not None:
                session.reader.cancel()
                await asyncio.gather(session.reader, return_exceptions=True)
        for task in list(self._handlers) + list(self._background):
            task.cancel()
        await asyncio.gather(*self._handlers, *self._background, return_exceptions=True)
        if self._supervisor is not None:
            await asyncio.gather(self._supervisor, return_exceptions=True)
        self._done.set()

    async def wait_closed(self) -> None:
        """Waits until the Bus ends for good. Returns after close(); raises
        the reason otherwise (TakenOver, Revoked, Disconnected). Raises a
        failed subscription of the subscribe decorator first, if any."""
        await self.subscriptions_ready()
        await self._done.wait()
        if self._ended is not None and type(self._ended) is not Closed:
            raise self._ended

    def _end(self, reason: BaseException) -> None:
        """Ends the Bus for good, without waiting for handlers."""
        if self._ended is None:
            self._ended = reason
        session, self._session = self._session, None
        if session is not None and session.reader is not None:
            session.reader.cancel()
        for task in self._handlers:
            task.cancel()
        self._done.set()

    # --- connecting --------------------------------------------------------

    async def _establish(self, url: str) -> _Session:
        """Dials url, initializes and re-subscribes every subscription in
        order, then makes the new session current."""
        try:
            socket = await transport.dial(url, self._token, self._max_message_bytes, self.call_timeout)
        except Exception as e:
            if transport.http_status(e) == 401:
                raise Unauthorized(f"dial {url}: the bus did not accept the credential (HTTP 401)") from None
            raise
        session = _Session(socket, url)
        session.reader = asyncio.create_task(self._read(session))
        params: dict[str, Any] = {"clientId": self.client_id, "clientInfo": {"name": self._client_name, "version": __version__}}
        if self.default_topic:
            params["defaultTopic"] = self.default_topic
        if self._publish_only:
            params["publishOnly"] = True
        try:
            result = await self._call_on(session, "initialize", wire.dumps(params), self.call_timeout)
            async with self._sub_lock:
                if self._ended is not None:
                    raise Closed("the Bus was closed")
                session.server_id = str(result.get("serverId", "")) if isinstance(result, dict) else ""
                self._limits = Limits.from_wire(result.get("limits") if isinstance(result, dict) else None)
                self._session = session
                for sub in list(self._subs.values()):
                    await self._subscribe_on(session, sub)
        except RPCError as e:
            await self._drop(session)
            if e.code == Code.UNAUTHORIZED:
                raise Unauthorized(f"initialize {url} as {self.client_id!r}: {e.message}") from None
            raise
        except BaseException:
            await self._drop(session)
            raise
        return session

    async def _drop(self, session: _Session) -> None:
        """Closes session and forgets it if it is current."""
        if self._session is session:
            self._session = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(session.socket.close(1000, "dropped"), self._write_timeout)
        if session.reader is not None:
            session.reader.cancel()

    async def _supervise(self, session: _Session | None) -> None:
        """Watches the current session and replaces it when it drops,
        until the Bus ends."""
        while session is not None:
            assert session.reader is not None
            # Waits for the read loop to end without taking on its
            # outcome; a cancel of the supervisor still ends it.
            await asyncio.wait({session.reader})
            if self._session is session:
                self._session = None
            if self._ended is not None:
                return
            session = await self._lost(session)

    async def _lost(self, session: _Session) -> _Session | None:
        code = transport.close_code(session.lost) if session.lost else None
        if code == _CLOSE_TAKEN_OVER:
            _log.warning("bub_bus: the bus closed the connection of %s: a newer one took over the clientId; not reconnecting", self.client_id)
            self._end(TakenOver(f"clientId {self.client_id!r} taken over by a newer connection"))
            return None
        if code in _CLOSE_REVOKED:
            _log.warning("bub_bus: the bus closed the connection of %s: its credential was revoked or narrowed (%s); not reconnecting", self.client_id, code)
            self._end(Revoked(f"the bus closed the connection with {code}: the credential was revoked or narrowed by its operator"))
            return None
        if not self._reconnect:
            self._end(Disconnected(f"connection to {session.url} lost: {session.lost}"))
            return None
        _log.warning("bub_bus: connection to %s lost (%s); reconnecting", session.url, session.lost)
        return await self._reconnect_loop()

    async def _reconnect_loop(self) -> _Session | None:
        """Tries to establish a new session, round after round over the
        addresses (the one after the lost one first), with the backoff
        between rounds, until one succeeds or the Bus ends."""
        attempts = 0
        for n in itertools.count():
            await asyncio.sleep(self._backoff(n))
            for _ in self._urls:
                if self._ended is not None:
                    return None
                self._at = (self._at + 1) % len(self._urls)
                url = self._urls[self._at]
                attempts += 1
                try:
                    session = await asyncio.wait_for(self._establish(url), self.call_timeout)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    _log.info("bub_bus: reconnect to %s failed (attempt %d): %s", url, attempts, e)
                    continue
                _log.info("bub_bus: reconnected to %s after %d attempts", url, attempts)
                return session
        return None  # unreachable: count() does not end

    def _backoff(self, n: int) -> float:
        """The wait before reconnect round n: doubling from reconnect_min up
        to reconnect_max, of which a random half, so that peers that lost
        the bus together do not all return at the same instant."""
        d = min(self._reconnect_max, self._reconnect_min * float(2 ** min(n, 32)))
        return d / 2 + random.uniform(0, d / 2)

    # --- reading -----------------------------------------------------------

    async def _read(self, session: _Session) -> None:
        """A session's read loop: hands the bus's calls to handlers and
        answers to the Bus's own calls to their callers."""
        try:
            while True:
                text = await session.socket.recv()
                if not isinstance(text, str):
                    continue
                try:
                    messages = wire.decode(text)
                except ValueError as e:
                    _log.warning("bub_bus: unreadable message from the bus: %s", e)
                    continue
                for m in messages:
                    self._dispatch(session, m)
        except transport.ConnectionClosed as e:
            session.lost = e
        except asyncio.CancelledError:
            session.lost = session.lost or Disconnected("connection closed")
            raise
        except Exception as e:
            session.lost = e
        finally:
            for future in session.pending.values():
                if not future.done():
                    future.set_exception(_Lost())
            session.pending.clear()

    def _dispatch(self, session: _Session, m: wire.Message) -> None:
        members = m.members
        if "method" in members:
            if "id" in members:
                self._serve(session, members, m.raw)
            return
        request_id = members.get("id")
        future = session.pending.get(request_id) if isinstance(request_id, int) else None
        if future is not None and not future.done():
            future.set_result(members)

    def _serve(self, session: _Session, request: dict[str, Any], raw: dict[str, str]) -> None:
        """Answers one call of the bus, exactly once, off the read loop."""
        request_id = request["id"]
        method = request.get("method")
        params = request.get("params")
        if method != "processMessage":
            self._reply_later(session, request_id, error=(Code.METHOD_NOT_FOUND, f"method not found: a peer serves only processMessage, not {method!r}"))
            return
        if not isinstance(params, dict) or not isinstance(params.get("payload"), dict) or "payload" not in raw:
            self._reply_later(session, request_id, error=(Code.INVALID_PARAMS, "invalid params: processMessage needs params {topic, subscription, payload, messageId, from, attempt}"))
            return
        pattern = str(params.get("subscription", ""))
        sub = self._subs.get(pattern)
        if sub is None and pattern in session.unsure:
            # A subscribe that timed out after the bus applied it: no
            # handler here, yet the bus routes to it. Ask for the message
            # again rather than let it be lost to this subscription.
            self._reply_later(session, request_id, result=Result(should_retry=True, message=f"subscription {pattern!r} not confirmed here yet"))
            return
        if sub is None:
            # Unsubscribed while the message was on its way: not ours to
            # handle, so let it propagate.
            self._reply_later(session, request_id, result=Result(message=f"no subscription to {pattern!r} here"))
            return
        running, bound = (sub.running, sub.max_concurrent_handlers) if sub.max_concurrent_handlers > 0 else (self._shared, self._max_handlers)
        if len(running) >= bound:
            busy = Result(should_retry=True, retry_after=_BUSY_RETRY_AFTER, message=f"busy: {bound} handlers already running")
            self._reply_later(session, request_id, result=busy)
            return
        meta = params.get("meta")
        delivery = Delivery(
            topic=str(params.get("topic", "")),
            subscription=pattern,
            message_id=str(params.get("messageId", "")),
            sender=str(params.get("from", "")),
            payload=params["payload"],
            raw_payload=raw["payload"].encode(),
            attempt=int(params.get("attempt") or 1),
            bus=self,
            meta=meta if isinstance(meta, dict) else None,
            raw_meta=raw["meta"].encode() if "meta" in raw and isinstance(meta, dict) else None,
        )
        task = asyncio.create_task(self._run_handler(session, request_id, sub, delivery))
        for tasks in (self._handlers, running):
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    def handler_budget(self) -> float:
        """How long a handler may run: handler_timeout, or the bus's
        delivery timeout less a tenth and less at most a second, so that
        the answer, even a give-up, reaches the bus before it stops
        waiting and delivers the message again."""
        if self.handler_timeout is not None and self.handler_timeout > 0:
            return self.handler_timeout
        timeout = self._limits.delivery_timeout or _DEFAULT_DELIVERY_TIMEOUT
        return float(timeout - min(timeout / 10, 1.0))

    async def _run_handler(self, session: _Session, request_id: Any, sub: _Subscription, d: Delivery) -> None:
        budget = self.handler_budget()
        # The handler's own TimeoutError (a CallTimeout of a call it made,
        # say) is a failure like any other: only the deadline's expiry
        # says the handler overran.
        deadline = asyncio.timeout(budget)
        try:
            async with deadline:
                result = await sub.handler(d)
            if not isinstance(result, Result):
                raise HandlerError(f"handler for {sub.pattern!r} returned {type(result).__name__}, not a Result")
        except (Retry, Reject) as answer:
            result = answer.result()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if isinstance(e, TimeoutError) and deadline.expired():
                _log.warning("bub_bus: handler for %r gave no answer within %.1fs (message %s)", sub.pattern, budget, d.message_id)
                await self._reply(session, request_id, error=(Code.INTERNAL_ERROR, f"handler for {sub.pattern!r} gave no answer within {budget:.1f}s"))
                return
            _log.exception("bub_bus: handler for %r failed (message %s on %s)", sub.pattern, d.message_id, d.topic)
            await self._reply(session, request_id, error=(Code.INTERNAL_ERROR, f"handler for {sub.pattern!r} failed: {type(e).__name__}: {e}"))
            return
        await self._reply(session, request_id, result=result)

    def _reply_later(self, session: _Session, request_id: Any, *, result: Result | None = None, error: tuple[int, str] | None = None) -> None:
        task = asyncio.create_task(self._reply(session, request_id, result=result, error=error))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _reply(self, session: _Session, request_id: Any, *, result: Result | None = None, error: tuple[int, str] | None = None) -> None:
        """Answers the bus's call; an answer that cannot be written is lost
        with its connection, and the bus records the delivery as failed."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if error is not None:
            message["error"] = {"code": int(error[0]), "message": error[1]}
        else:
            message["result"] = (result or Result()).wire()
        with contextlib.suppress(Exception):
            await self._write(session, wire.dumps(message))

    async def _write(self, session: _Session, text: str) -> None:
        try:
            await asyncio.wait_for(session.socket.send(text), self._write_timeout)
        except asyncio.TimeoutError:
            # A connection that cannot write is dropped; the read loop
            # then ends and the Bus reconnects.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.socket.close(1011, "write timed out"), 1)
            raise Disconnected(f"write to {session.url} timed out after {self._write_timeout}s") from None

    # --- calling -----------------------------------------------------------

    def _current(self) -> _Session:
        if self._session is not None:
            return self._session
        if self._ended is not None:
            if isinstance(self._ended, Closed):
                raise self._ended
            raise Disconnected(f"the Bus ended: {self._ended}")
        if not self._started:
            raise Disconnected("not connected: use `async with bus` or await bus.connect() first")
        raise Disconnected("not connected to the bus (reconnecting)")

    async def _call_on(self, session: _Session, method: str, params: str, timeout: float) -> Any:
        """Calls method with params (JSON text) on session and returns the
        result as decoded, or raises RPCError, CallTimeout or
        Disconnected."""
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        session.pending[request_id] = future
        try:
            try:
                await self._write(session, f'{{"jsonrpc":"2.0","id":{request_id},"method":{wire.dumps(method)},"params":{params}}}')
            except transport.ConnectionClosed as e:
                raise Disconnected(f"{method}: connection lost: {e}") from None
            try:
                answer = await asyncio.wait_for(future, timeout)
            except asyncio.TimeoutError:
                raise CallTimeout(f"{method}: no answer within {timeout:g}s") from None
            except _Lost:
                if isinstance(self._ended, Closed):
                    raise self._ended from None
                raise Disconnected(f"{method}: connection lost before the answer") from None
        finally:
            session.pending.pop(request_id, None)
        error = answer.get("error")
        if error is not None:
            if not isinstance(error, dict):
                raise RPCError(method, int(Code.INTERNAL_ERROR), f"malformed error: {error!r}")
            raise RPCError(method, int(error.get("code", 0)), str(error.get("message", "")), error.get("data"))
        return answer.get("result")

    async def call(self, method: str, params: wire.JSONValue | None = None, *, timeout: float | None = None) -> Any:
        """Makes any JSON-RPC call on the bus (the dlq.* methods, say) and
        returns its result decoded. params is a mapping, or raw JSON bytes
        sent as they are; None sends {}."""
        text = "{}" if params is None else wire.encode_object(params, f"{method} params")
        return await self._call_on(self._current(), method, text, timeout or self.call_timeout)

    async def ping(self) -> datetime:
        """Asks the bus for its clock, which proves the connection works
        end to end."""
        result = await self.call("ping")
        stamp = str(result.get("timestamp", "")) if isinstance(result, dict) else ""
        try:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            raise BusError(f"ping: timestamp {stamp!r} is not RFC 3339") from None

    async def send_message(
        self,
        topic: str | None,
        payload: wire.JSONValue,
        *,
        meta: wire.JSONValue | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Publishes payload to topic and returns once every subscriber in
        the routing chain has answered, with their acks. topic None or ""
        means the default topic. payload (and meta) is a mapping, encoded
        in its key order, or raw JSON bytes, sent byte for byte; it must be
        an object with a string "type", else the bus answers -32602.

        A message no subscription matched is not an error: the result's
        reason is "no_subscribers". Not retried: after Disconnected or
        CallTimeout the message may or may not have been delivered. A
        message larger than the bus accepts raises MessageTooBig before
        sending. timeout defaults to the larger of call_timeout and the
        bus's delivery timeout plus 5 s."""
        name = topic or self.default_topic
        body = wire.encode_object(payload, f"sendMessage {name!r}: payload")
        params = "{"
        if topic:
            params += '"topic":' + wire.dumps(topic) + ","
        params += '"payload":' + body
        if meta is not None:
            params += ',"meta":' + wire.encode_object(meta, f"sendMessage {name!r}: meta")
        params += "}"
        limit = self._limits.max_message_bytes
        if limit > 0:
            size = len(params.encode()) + _REQUEST_OVERHEAD
            if size > limit:
                raise MessageTooBig(
                    f"sendMessage {name!r}: the request is {size} bytes, over the bus's limit of {limit} bytes "
                    "(maxMessageBytes; bub serve --max-message-bytes)"
                )
        if timeout is None:
            timeout = max(self.call_timeout, (self._limits.delivery_timeout or _DEFAULT_DELIVERY_TIMEOUT) + 5)
        result = await self._call_on(self._current(), "sendMessage", params, timeout)
        if not isinstance(result, dict):
            raise BusError(f"sendMessage {name!r}: result is not an object: {result!r}")
        return SendResult.from_wire(result)

    # --- subscriptions -----------------------------------------------------

    def subscribe(
        self,
        pattern: str,
        *,
        policy: Policy | str | None = None,
        fallback: bool = False,
        durable: bool = False,
        max_concurrent_handlers: int = 0,
    ) -> Callable[[H], H]:
        """A decorator that subscribes pattern (an exact topic, a prefix
        ending in ':' or '-', or a glob; docs/PROTOCOL.md) with the
        decorated async handler::

            @bus.subscribe("tg:*", policy=Policy.CONTINUE_ALL)
            async def on_telegram(d: Delivery) -> Result: ...

        Before connect the subscription is made at connect, in the order
        registered, and a refusal raises from connect. On a connected Bus
        it is made in the background: await subscriptions_ready() (or
        wait_closed()) to learn of a refusal. Either way the Bus holds it
        across reconnects. policy is a Policy (default: the bus's default
        policy); fallback makes a fallback subscription; durable makes it
        the clientId's rather than the connection's: messages for it are
        held while no connection holds it, and delivered, in order, when it
        is subscribed again (docs/PROTOCOL.md, "Durable subscriptions";
        the credential needs durable: true). max_concurrent_handlers,
        when positive, bounds this subscription's handlers running at
        once on a budget of its own, apart from the Bus's: its deliveries
        neither take the shared places nor are refused for want of one,
        which a subscription whose deliveries must get through while the
        others' handlers block needs (default 0: the Bus's shared
        bound)."""

        def register(handler: H) -> H:
            if pattern in self._subs:
                raise ValueError(f"subscribe {pattern!r}: this Bus already subscribed to it")
            sub = _Subscription(pattern, handler, policy, fallback, durable, max_concurrent_handlers)
            self._subs[pattern] = sub
            if self._started:
                task = asyncio.create_task(self._subscribe_in_background(sub))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            return handler

        return register

    async def _subscribe_in_background(self, sub: _Subscription) -> None:
        async with self._sub_lock:
            session = self._session
            # A reconnect made meanwhile subscribed it already; without a
            # session the next reconnect will.
            if session is None or self._subs.get(sub.pattern) is not sub or sub.pattern in session.patterns:
                return
            try:
                await self._subscribe_on(session, sub)
            except (Disconnected, Closed):
                return
            except BusError as e:
                del self._subs[sub.pattern]
                _log.error("bub_bus: subscribe %r failed: %s", sub.pattern, e)
                self._subscribe_errors.append(e)

    async def subscriptions_ready(self) -> None:
        """Waits for the subscriptions the decorator started in the
        background and raises the first that failed."""
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._subscribe_errors:
            error, self._subscribe_errors = self._subscribe_errors[0], []
            raise error

    async def add_subscription(
        self,
        pattern: str,
        handler: Handler,
        *,
        policy: Policy | str | None = None,
        fallback: bool = False,
        durable: bool = False,
        max_concurrent_handlers: int = 0,
    ) -> None:
        """Subscribes pattern with handler now, raising what the bus
        answers (RPCError: -32003 when held already, -32010 outside the
        grant). Raises Disconnected at once while reconnecting: it is not
        queued. durable and max_concurrent_handlers are as for
        subscribe."""
        sub = _Subscription(pattern, handler, policy, fallback, durable, max_concurrent_handlers)
        self._current()
        async with self._sub_lock:
            session = self._current()
            if pattern in self._subs:
                raise RPCError("subscribe", int(Code.ALREADY_SUBSCRIBED), f"already subscribed: this Bus already subscribed to {pattern!r}")
            # In place before the answer: the first delivery may arrive
            # before it does.
            self._subs[pattern] = sub
            try:
                await self._subscribe_on(session, sub)
            except BaseException:
                if self._subs.get(pattern) is sub:
                    del self._subs[pattern]
                raise

    async def _subscribe_on(self, session: _Session, sub: _Subscription) -> None:
        """Asks the bus for sub on session. A subscribe whose call timed out
        may have been applied all the same, so the session remembers it:
        when the bus then says "already subscribed", that earlier call is
        what it holds, kept when its params are these, else replaced, so
        that the bus never keeps a policy the Bus does not know of."""
        params = sub.params()
        try:
            await self._call_on(session, "subscribe", wire.dumps(params), self.call_timeout)
        except CallTimeout:
            session.unsure.setdefault(sub.pattern, params)
            raise
        except RPCError as e:
            earlier = session.unsure.get(sub.pattern)
            if earlier is None or e.code != Code.ALREADY_SUBSCRIBED:
                raise
            del session.unsure[sub.pattern]
            if earlier != params:
                await self._call_on(session, "unsubscribe", wire.dumps({"topic": sub.pattern}), self.call_timeout)
                await self._subscribe_on(session, sub)
                return
        session.unsure.pop(sub.pattern, None)
        session.patterns.add(sub.pattern)

    async def unsubscribe(self, pattern: str) -> None:
        """Ends the subscription to pattern, the exact string subscribed.
        Deliveries on their way are still handled."""
        self._current()
        async with self._sub_lock:
            session = self._current()
            # A pattern whose subscribe timed out may be held by the bus
            # though not by the Bus: it is unsubscribed all the same.
            if pattern not in self._subs and pattern not in session.unsure:
                raise RPCError("unsubscribe", int(Code.SUBSCRIPTION_NOT_FOUND), f"subscription not found: this Bus holds no subscription to {pattern!r}")
            try:
                await self._call_on(session, "unsubscribe", wire.dumps({"topic": pattern}), self.call_timeout)
            except RPCError as e:
                # "Not found" means the two agree already.
                if e.code != Code.SUBSCRIPTION_NOT_FOUND:
                    raise
            session.patterns.discard(pattern)
            session.unsure.pop(pattern, None)
            self._subs.pop(pattern, None)

    @property
    def patterns(self) -> list[str]:
        """The patterns this Bus holds, in subscribe order."""
        return list(self._subs)
