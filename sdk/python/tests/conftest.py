"""Fixtures: the real bub binary, built once, and buses it serves on
loopback with a data directory of their own."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "sdk" / "python" / "src"))

# Every wait in these tests is bounded by this; none proves absence.
TIMEOUT = 20.0

T = TypeVar("T")


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    """Runs one test's coroutine on a fresh event loop, bounded."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """Polls condition until it holds, failing after timeout."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


async def until(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """The async twin of wait_for."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture(scope="session")
def bub(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The bub binary: $BUB_BINARY, or built from this checkout."""
    given = os.environ.get("BUB_BINARY")
    if given:
        return given
    go = shutil.which("go")
    if go is None:
        pytest.skip("no go toolchain to build bub, and BUB_BINARY is not set")
    out = tmp_path_factory.mktemp("bin") / "bub"
    subprocess.run([go, "build", "-o", str(out), "./cmd/bub"], cwd=ROOT, check=True, timeout=600)
    return str(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Process:
    """A bub command running in the background, its output in a file."""

    def __init__(self, args: list[str], log: Path, ready: str) -> None:
        self.args, self.log, self.ready = args, log, ready
        self.proc: subprocess.Popen[bytes] | None = None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self) -> None:
        offset = len(self.output())
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(self.args, stdout=f, stderr=subprocess.STDOUT, env=_clean_env())
        proc = self.proc
        wait_for(lambda: self.ready in self.output()[offset:] or proc.poll() is not None, f"{self.args[1]} to start")
        if proc.poll() is not None:
            raise AssertionError(f"{' '.join(self.args)} exited {proc.returncode}:\n{self.output()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(TIMEOUT)
        self.proc = None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)


def _clean_env() -> dict[str, str]:
    """The environment without the BUB_* variables of whoever runs the
    tests, which would change what bub does."""
    return {k: v for k, v in os.environ.items() if not k.startswith("BUB_")}


class BusServer(Process):
    """bub serve on a free loopback port with a temporary data dir."""

    def __init__(self, bub: str, tmp: Path, flags: list[str], config: str | None) -> None:
        self.port = free_port()
        self.config = tmp / "bus.yaml"
        args = [bub, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(tmp / "data"), "--drain-timeout", "2s", *flags]
        if config is not None:
            self.config.write_text(config)
            args += ["--config", str(self.config)]
        super().__init__(args, tmp / "bus.log", "bus listening")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def journal(self, message_id: str) -> list[dict[str, Any]]:
        """The bus's journal of one message (GET /v1/events, open on a
        bus without auth), oldest event first."""
        query = urllib.parse.urlencode({"messageId": message_id, "limit": 1000})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/events?{query}", timeout=TIMEOUT) as resp:
            events: list[dict[str, Any]] = json.loads(resp.read())["events"]
        return events

    def reload(self, config: str) -> None:
        """Rewrites the configuration and has the bus reload it."""
        before = self.output().count("configuration reloaded")
        self.config.write_text(config)
        self.signal(signal.SIGHUP)
        wait_for(lambda: self.output().count("configuration reloaded") > before, "the reload")

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    """The test's background processes, stopped at its end, the last
    started first (a gateway before its bus)."""
    started: list[Process] = []
    yield started
    for p in reversed(started):
        p.stop()


@pytest.fixture
def start_bus(bub: str, tmp_path: Path, processes: list[Process]) -> Callable[..., BusServer]:
    """Starts a bus: start_bus(*flags, config=YAML)."""

    def start(*flags: str, config: str | None = None) -> BusServer:
        d = tmp_path / f"bus{len(processes)}"
        d.mkdir()
        server = BusServer(bub, d, list(flags), config)
        processes.append(server)
        server.start()
        return server

    return start


@pytest.fixture
def bus_server(start_bus: Callable[..., BusServer]) -> BusServer:
    """A bus without auth, with short retry delays."""
    return start_bus("--retry-base-delay", "50ms")


@pytest.fixture
def start_process(tmp_path: Path, processes: list[Process]) -> Callable[..., Process]:
    """Starts another bub command: start_process(args, ready=LOG_TEXT)."""

    def start(args: list[str], ready: str) -> Process:
        p = Process(args, tmp_path / f"process{len(processes)}.log", ready)
        processes.append(p)
        p.start()
        return p

    return start
