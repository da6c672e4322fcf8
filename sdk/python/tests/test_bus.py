"""The Bus against a real bub serve: connecting, subscribing, policies,
retries, holds, limits and reconnecting."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from conftest import BusServer, run, until

from bub_bus import Bus, CallTimeout, Delivery, Disconnected, MessageTooBig, Policy, Reject, Result, Retry, RPCError, TakenOver
from bub_bus.errors import Code


def test_connect_send_and_payload_bytes(bus_server: BusServer) -> None:
    """A delivery carries the publisher's bytes: key order, spacing and
    escapes as sent, and the sender the bus attests."""
    raw = b'{"type":"note", "z": 1,"a":"\\u00e9 <&>","nested":{"y":[1, 2],"b":null}}'

    async def main() -> None:
        got: asyncio.Queue[Delivery] = asyncio.Queue()
        async with Bus(bus_server.url, client_id="subscriber") as sub, Bus(bus_server.url, client_id="publisher") as pub:
            assert sub.limits.max_message_bytes == 1 << 20
            assert sub.limits.delivery_timeout == 30.0
            assert sub.server_id.startswith("bub-")
            assert (await sub.ping()).year >= 2024

            async def handle(d: Delivery) -> Result:
                await got.put(d)
                return Result(processed=True, message="noted")

            await sub.add_subscription("notes:*", handle)
            res = await pub.send_message("notes:1", raw, meta={"traceparent": "00-abc"})
            assert res.success and res.message_id
            assert [(a.client_id, a.subscription, a.processed, a.message) for a in res.acks] == [("subscriber", "notes:*", True, "noted")]
            d = got.get_nowait()
            assert d.raw_payload == raw
            assert list(d.payload) == ["type", "z", "a", "nested"]
            assert d.payload["a"] == "é <&>" and d.type == "note"
            assert (d.topic, d.subscription, d.sender, d.attempt) == ("notes:1", "notes:*", "publisher", 1)
            assert d.raw_meta == b'{"traceparent":"00-abc"}'

            # A mapping is encoded in its key order.
            await pub.send_message("notes:2", {"type": "note", "b": 2, "a": 1})
            assert got.get_nowait().raw_payload == b'{"type":"note","b":2,"a":1}'

            none = await pub.send_message("nobody:1", {"type": "t"})
            assert not none.success and none.reason == "no_subscribers" and none.acks == []

            with pytest.raises(RPCError) as bad:
                await pub.send_message("notes:3", {"no": "type"})
            assert bad.value.code == Code.INVALID_PARAMS

    run(main())


def test_decorator_subscribes_at_connect_and_later(bus_server: BusServer) -> None:
    async def main() -> None:
        bus = Bus(bus_server.url, client_id="agent-x")
        seen: list[str] = []

        @bus.subscribe("early:*")
        async def early(d: Delivery) -> Result:
            seen.append(d.topic)
            return Result(processed=True)

        async with bus, Bus(bus_server.url) as pub:
            assert (await pub.send_message("early:1", {"type": "t"})).success

            @bus.subscribe("late:*", policy=Policy.CONTINUE_ALL)
            async def late(d: Delivery) -> Result:
                seen.append(d.topic)
                return Result(processed=True)

            await bus.subscriptions_ready()
            assert (await pub.send_message("late:1", {"type": "t"})).success
            assert seen == ["early:1", "late:1"]
            assert bus.patterns == ["early:*", "late:*"]

            # A refusal of the bus reaches subscriptions_ready.
            bus.subscribe("bad{pattern")(early)
            with pytest.raises(RPCError) as refused:
                await bus.subscriptions_ready()
            assert refused.value.code == Code.INVALID_PARAMS
            assert bus.patterns == ["early:*", "late:*"]

            await bus.unsubscribe("late:*")
            assert not (await pub.send_message("late:2", {"type": "t"})).success

    run(main())


def test_policies(bus_server: BusServer) -> None:
    """Last match wins, and each subscription's policy decides whether the
    message goes on."""

    async def main() -> None:
        async def processed(d: Delivery) -> Result:
            return Result(processed=True)

        async with Bus(bus_server.url, client_id="old") as old, Bus(bus_server.url, client_id="observer") as observer, Bus(
            bus_server.url, client_id="new"
        ) as new, Bus(bus_server.url) as pub:
            await old.add_subscription("orders:*", processed)
            await observer.add_subscription("orders:*", processed, policy=Policy.CONTINUE_ALL)
            res = await pub.send_message("orders:1", {"type": "order"})
            # The observer's newer identical pattern shadows the old one.
            assert [a.client_id for a in res.acks] == ["observer"]

            await new.add_subscription("orders:1", processed, policy=Policy.STOP_ON_STOP)
            res = await pub.send_message("orders:1", {"type": "order"})
            assert [a.client_id for a in res.acks] == ["new", "observer"]

            await new.unsubscribe("orders:1")
            await new.add_subscription("orders:1", processed)  # the default stops on processed
            res = await pub.send_message("orders:1", {"type": "order"})
            assert [a.client_id for a in res.acks] == ["new"]

    run(main())


def test_retries(bus_server: BusServer) -> None:
    """Retry raised asks for the message again; any other exception is a
    failed delivery, which the bus retries too."""

    async def main() -> None:
        attempts: list[tuple[str, int]] = []
        done = asyncio.Event()

        async def flaky(d: Delivery) -> Result:
            attempts.append((d.message_id, d.attempt))
            if d.attempt == 1:
                raise Retry("not yet", after=0.05)
            if d.attempt == 2:
                raise RuntimeError("broken")
            done.set()
            return Result(processed=True)

        async with Bus(bus_server.url, client_id="worker") as worker, Bus(bus_server.url) as pub:
            await worker.add_subscription("jobs:*", flaky)
            res = await pub.send_message("jobs:1", {"type": "job"})
            (ack,) = res.acks
            assert not ack.processed and ack.retrying and ack.message == "not yet"
            await asyncio.wait_for(done.wait(), 20)
            assert attempts == [(res.message_id, 1), (res.message_id, 2), (res.message_id, 3)]

            async def broken(d: Delivery) -> Result:
                raise ValueError("no good")

            await worker.add_subscription("broken:*", broken)
            (ack,) = (await pub.send_message("broken:1", {"type": "job"})).acks
            assert "no good" in ack.error and ack.retrying

            async def upstream_timeout(d: Delivery) -> Result:
                # The handler's own timeout, well within its budget: a
                # failure, not an overrun of the budget.
                raise TimeoutError("the upstream API timed out")

            await worker.add_subscription("upstream:*", upstream_timeout)
            (ack,) = (await pub.send_message("upstream:1", {"type": "job"})).acks
            assert "the upstream API timed out" in ack.error and "no answer within" not in ack.error

    run(main())


def test_reject_dead_letters_at_once(bus_server: BusServer) -> None:
    """Reject raised, or Result(reject=True), refuses the message for good
    on its first attempt: the ack names the dead letter, which the queue
    holds with reason rejected and that one attempt; reject outweighs
    should_retry and is ignored with processed."""

    async def main() -> None:
        async def refuse(d: Delivery) -> Result:
            raise Reject(f"cannot take {d.payload['n']}")

        async def refuse_over_retry(d: Delivery) -> Result:
            return Result(reject=True, should_retry=True, retry_after=0.05, message="never")

        async def handle_anyway(d: Delivery) -> Result:
            return Result(processed=True, reject=True, message="done")

        async with Bus(bus_server.url, client_id="worker") as worker, Bus(bus_server.url, client_id="pub") as pub:
            await worker.add_subscription("refused:*", refuse)
            await worker.add_subscription("never:*", refuse_over_retry)
            await worker.add_subscription("handled:*", handle_anyway)

            for topic, reason in (("refused:1", "cannot take 1"), ("never:1", "never")):
                res = await pub.send_message(topic, {"type": "job", "n": 1})
                (ack,) = res.acks
                assert (ack.processed, ack.retrying, ack.error, ack.message) == (False, False, "", reason), ack
                assert ack.dead_letter.startswith("d-"), ack
                assert "dead_letter" not in ack.extra
                entry = await pub.call("dlq.get", {"id": ack.dead_letter})
                assert (entry["messageId"], entry["topic"], entry["client_id"], entry["reason"]) == (res.message_id, topic, "worker", "rejected")
                (attempt,) = entry["attempts"]
                assert reason in attempt["error"], attempt

            listed = await pub.call("dlq.list", {"reason": "rejected"})
            assert sorted(e["topic"] for e in listed["entries"]) == ["never:1", "refused:1"]

            (ack,) = (await pub.send_message("handled:1", {"type": "job"})).acks
            assert ack.processed and ack.dead_letter == "" and not ack.retrying
            assert (await pub.call("dlq.list", {"topic": "handled:*"}))["entries"] == []

    run(main())


def test_hold_and_delivery_on_subscribe(bus_server: BusServer) -> None:
    """A message to an absent agent is held and delivered when it
    subscribes."""

    async def main() -> None:
        async with Bus(bus_server.url) as pub:
            res = await pub.send_message("agent:ghost", {"type": "task", "n": 1})
            assert res.held and not res.success and res.next_attempt
            got: asyncio.Queue[Delivery] = asyncio.Queue()

            async def handle(d: Delivery) -> Result:
                await got.put(d)
                return Result(processed=True)

            async with Bus(bus_server.url, client_id="ghost") as ghost:
                ghost.subscribe(ghost.agent_topic)(handle)
                await ghost.subscriptions_ready()
                d = await asyncio.wait_for(got.get(), 20)
                assert (d.message_id, d.sender, d.raw_payload) == (res.message_id, pub.client_id, b'{"type":"task","n":1}')

    run(main())


def test_limits_and_handler_timeout(start_bus: Any) -> None:
    """The announced limits are honoured: a message over maxMessageBytes is
    refused before sending, and a handler that overruns is answered
    before the bus's delivery timeout."""
    server = start_bus("--max-message-bytes", "2048", "--delivery-timeout", "2s", "--retry-base-delay", "10s")

    async def main() -> None:
        async def stuck(d: Delivery) -> Result:
            await asyncio.Event().wait()
            return Result(processed=True)

        async with Bus(server.url, client_id="slow") as slow, Bus(server.url) as pub:
            assert pub.limits.max_message_bytes == 2048 and slow.limits.delivery_timeout == 2.0
            assert slow.handler_budget() == pytest.approx(1.8)
            with pytest.raises(MessageTooBig):
                await pub.send_message("big:1", {"type": "t", "text": "x" * 4096})
            assert await pub.ping()  # the connection is still up

            await slow.add_subscription("slow:*", stuck)
            (ack,) = (await pub.send_message("slow:1", {"type": "t"})).acks
            assert ack.error.startswith("error:") and "no answer within 1.8s" in ack.error

    run(main())


def test_reconnect_across_restart(bus_server: BusServer) -> None:
    """The Bus reconnects when the bus restarts and subscribes again, in
    order; calls meanwhile raise Disconnected at once."""

    async def main() -> None:
        got: asyncio.Queue[Delivery] = asyncio.Queue()

        async def handle(d: Delivery) -> Result:
            await got.put(d)
            return Result(processed=True)

        async with Bus(bus_server.url, client_id="survivor", reconnect_max=0.2) as bus:
            await bus.add_subscription("keep:*", handle)
            await asyncio.to_thread(bus_server.stop)
            await until(lambda: not bus.connected, "the Bus to notice")
            with pytest.raises(Disconnected):
                await bus.send_message("keep:0", {"type": "t"})
            await asyncio.to_thread(bus_server.start)
            await until(lambda: bus.connected, "the Bus to reconnect")
            assert bus.patterns == ["keep:*"]
            async with Bus(bus_server.url) as pub:
                assert (await pub.send_message("keep:1", {"type": "t"})).success
            assert (await got.get()).topic == "keep:1"

    run(main())


def test_several_urls_and_from_env(bus_server: BusServer) -> None:
    """BUB_BUS_URL may list several nodes: one that cannot be reached is
    skipped."""
    from conftest import free_port

    dead = f"ws://127.0.0.1:{free_port()}/"

    async def main() -> None:
        env = {"BUB_BUS_URL": f"{dead} , {bus_server.url}", "BUB_AGENT_ID": "agent-env", "BUB_DEFAULT_TOPIC": "tg:5"}
        async with Bus.from_env(env) as bus:
            assert bus.client_id == "agent-env" and bus.url == bus_server.url
            res = await bus.send_message(None, {"type": "t"})
            assert res.reason == "no_subscribers"
        with pytest.raises(ValueError, match="BUB_AGENT_ID"):
            Bus.from_env({})
        with pytest.raises(ValueError, match="bus URL 2 of 2"):
            Bus("ws://a/,ftp://b/")
        with pytest.raises(ValueError, match=r"empty port; did you mean ws://127\.0\.0\.1:7892/\?"):
            Bus("ws://127.0.0.1:/")
        with pytest.raises(Disconnected):
            async with Bus(dead):
                pass

    run(main())


def test_takeover_ends_the_older_bus(bus_server: BusServer) -> None:
    async def main() -> None:
        async with Bus(bus_server.url, client_id="twin") as first:
            async with Bus(bus_server.url, client_id="twin"):
                with pytest.raises(TakenOver):
                    await asyncio.wait_for(first.wait_closed(), 20)
                assert not first.connected

    run(main())


def test_reconnect_moves_to_the_next_node(start_bus: Any) -> None:
    """With several addresses, a Bus that loses its node reconnects to the
    next one and subscribes there."""
    first, second = start_bus(), start_bus()

    async def main() -> None:
        got: asyncio.Queue[Delivery] = asyncio.Queue()

        async def handle(d: Delivery) -> Result:
            await got.put(d)
            return Result(processed=True)

        async with Bus(f"{first.url},{second.url}", client_id="mover", reconnect_max=0.2) as bus:
            await bus.add_subscription("moving:*", handle)
            assert bus.url == first.url
            await asyncio.to_thread(first.stop)
            await until(lambda: bus.connected and bus.url == second.url, "the Bus to reach the second node")
            async with Bus(second.url) as pub:
                (ack,) = (await pub.send_message("moving:1", {"type": "t"})).acks
                assert ack.client_id == "mover" and ack.processed
            assert (await got.get()).topic == "moving:1"

    run(main())


def test_busy_handlers_answer_should_retry(bus_server: BusServer) -> None:
    """Beyond max_concurrent_handlers a delivery is answered should_retry
    at once instead of waiting for a slot."""

    async def main() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        async def blocking(d: Delivery) -> Result:
            started.set()
            await release.wait()
            return Result(processed=True)

        async with Bus(bus_server.url, client_id="narrow", max_concurrent_handlers=1) as narrow, Bus(bus_server.url) as pub:
            await narrow.add_subscription("work:*", blocking)
            first = asyncio.create_task(pub.send_message("work:1", {"type": "t"}))
            await started.wait()
            (ack,) = (await pub.send_message("work:2", {"type": "t"})).acks
            assert ack.retrying and ack.message == "busy: 1 handlers already running"
            release.set()
            assert (await first).acks[0].processed

    run(main())


def test_subscription_handler_bound_is_its_own(bus_server: BusServer) -> None:
    """A subscription with max_concurrent_handlers of its own is not
    refused while the Bus's shared handlers are all taken, and takes
    none of them (the spawner's system:client.* events while every
    shared handler waits for an agent); its own bound is enforced in
    turn."""

    async def main() -> None:
        started: asyncio.Queue[str] = asyncio.Queue()
        release = asyncio.Event()

        async def blocking(d: Delivery) -> Result:
            await started.put(d.topic)
            await release.wait()
            return Result(processed=True)

        async with Bus(bus_server.url, client_id="narrow", max_concurrent_handlers=1) as narrow, Bus(bus_server.url) as pub:
            await narrow.add_subscription("shared", blocking)
            await narrow.add_subscription("own", blocking, max_concurrent_handlers=1)
            shared = asyncio.create_task(pub.send_message("shared", {"type": "t"}))
            assert await started.get() == "shared"
            # The shared bound is taken; the subscription with its own
            # is served all the same.
            own = asyncio.create_task(pub.send_message("own", {"type": "t"}))
            got = asyncio.create_task(started.get())
            await asyncio.wait({got, own}, return_when=asyncio.FIRST_COMPLETED)
            assert got.done() and got.result() == "own", f"refused while the shared handlers were taken: {own.result().acks if own.done() else None}"
            # Each bound is full now, and each refuses on its own count.
            for topic in ("shared", "own"):
                (ack,) = (await pub.send_message(topic, {"type": "t"})).acks
                assert ack.retrying and ack.message == "busy: 1 handlers already running", (topic, ack)
            release.set()
            assert (await shared).acks[0].processed and (await own).acks[0].processed

    run(main())


def test_subscribe_that_timed_out(start_bus: Callable[..., BusServer]) -> None:
    """A subscribe whose answer came too late may have been applied: its
    deliveries are answered should_retry rather than lost, and subscribing
    again takes the bus's "already subscribed" for the subscription.

    Which attempt reaches the handler is not the protocol's to say: the
    bus retries 25 to 50 ms after the first (--retry-base-delay 50ms, with
    jitter), and a test that resumes later than that after the ack sees
    that retry answered should_retry too, before it subscribes. So it
    asserts what is determined: every attempt before the handled one was
    answered should_retry (not processed, then retried, by the bus's
    journal), and the message reaches the handler once subscribed. The
    attempts are not bounded by five, so that a test held up for longer
    than the first four retries take gets the message still rather than
    see it dead-lettered."""
    server = start_bus("--retry-base-delay", "50ms", "--max-attempts", "30")

    async def main() -> None:
        got: asyncio.Queue[Delivery] = asyncio.Queue()

        async def handle(d: Delivery) -> Result:
            await got.put(d)
            return Result(processed=True)

        async with Bus(server.url, client_id="hasty") as bus, Bus(server.url) as pub:
            bus.call_timeout = 0  # the answer cannot have come yet
            with pytest.raises(CallTimeout):
                await bus.add_subscription("unsure:*", handle)
            bus.call_timeout = 30
            await bus.ping()  # answered after the subscribe: the bus applied it
            (ack,) = (await pub.send_message("unsure:1", {"type": "t"})).acks
            assert ack.retrying and "not confirmed" in ack.message
            await bus.add_subscription("unsure:*", handle)
            d = await got.get()
            assert d.topic == "unsure:1" and d.attempt >= 2
            assert bus.patterns == ["unsure:*"]
            # The bus journals an attempt's end, and the retry it schedules,
            # before it makes the next attempt: those before d are all there.
            seen = [
                (e["kind"], e["attempt"], e.get("outcome"))
                for e in await asyncio.to_thread(server.journal, d.message_id)
                if e["kind"] in ("delivery", "retry_scheduled") and e["attempt"] <= d.attempt
            ]
            asked_again = [
                step for n in range(1, d.attempt) for step in (("delivery", n, "not_processed"), ("retry_scheduled", n + 1, None))
            ]
            assert seen[: len(asked_again)] == asked_again
            assert seen[len(asked_again) :] in ([], [("delivery", d.attempt, "processed")])

    run(main())


def test_durable_subscription_holds_while_away(bus_server: BusServer) -> None:
    """A durable subscription outlives its Bus: what is published while no
    connection holds it is held, then delivered in order when a new Bus of
    the same clientId subscribes again."""

    async def main() -> None:
        async def ignore(d: Delivery) -> Result:
            return Result(processed=True)

        async with Bus(bus_server.url, client_id="keeper") as first:
            await first.add_subscription("feed:x", ignore, durable=True)

        async with Bus(bus_server.url, client_id="publisher") as pub:

            async def away() -> bool:
                listed = await pub.call("subscriptions.list", {"clientId": "keeper"})
                return [s["away"] for s in listed["subscriptions"]] == [True]

            deadline = asyncio.get_running_loop().time() + 20
            while not await away():
                assert asyncio.get_running_loop().time() < deadline, "the owner never went away"
                await asyncio.sleep(0.02)
            sent = []
            for i in range(3):
                res = await pub.send_message("feed:x", {"type": "item", "n": i})
                assert [(a.client_id, a.held) for a in res.acks] == [("keeper", True)]
                sent.append(res.message_id)

            got: list[str] = []

            async def collect(d: Delivery) -> Result:
                got.append(d.message_id)
                return Result(processed=True)

            async with Bus(bus_server.url, client_id="keeper") as back:
                await back.add_subscription("feed:x", collect, durable=True)
                await until(lambda: len(got) == 3, "the held messages")
                assert got == sent

    run(main())
