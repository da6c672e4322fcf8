"""An agent's bus environment, as the spawner sets it, and the bus's
address list."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_BUS_URL = "ws://127.0.0.1:7892/"
"""Where a client looks for the bus when BUB_BUS_URL is unset: the address
``bub serve`` listens on by default."""


@dataclass(frozen=True)
class Env:
    """The BUB_* variables of docs/PROTOCOL.md, "Agent environment"."""

    bus_url: str = DEFAULT_BUS_URL
    """BUB_BUS_URL: one address, or several nodes of one bus,
    comma-separated."""
    agent_id: str = ""
    """BUB_AGENT_ID: the agent's clientId."""
    default_topic: str = ""
    """BUB_DEFAULT_TOPIC: where the agent's messages go when they name no
    topic."""
    workspace: str = ""
    """BUB_WORKSPACE: the agent's working directory."""
    token: str = ""
    """BUB_TOKEN: the agent's credential; never logged."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Env:
        """Reads the variables from environ (default: os.environ)."""
        e = os.environ if environ is None else environ
        return cls(
            bus_url=e.get("BUB_BUS_URL") or DEFAULT_BUS_URL,
            agent_id=e.get("BUB_AGENT_ID", ""),
            default_topic=e.get("BUB_DEFAULT_TOPIC", ""),
            workspace=e.get("BUB_WORKSPACE", ""),
            token=e.get("BUB_TOKEN", ""),
        )

    def __repr__(self) -> str:
        token = "<set>" if self.token else ""
        return (
            f"Env(bus_url={self.bus_url!r}, agent_id={self.agent_id!r}, default_topic={self.default_topic!r}, "
            f"workspace={self.workspace!r}, token={token!r})"
        )


def agent_topic(agent_id: str) -> str:
    """The topic of an agent's direct messages, ``agent:{agent_id}``."""
    return "agent:" + agent_id


def split_urls(urls: str) -> list[str]:
    """Splits a comma-separated list of bus addresses and checks each, so
    that a typo in the third of three is reported at once rather than when
    the first two nodes are down. Raises ValueError naming the culprit."""
    parts = urls.split(",")
    out = []
    for n, part in enumerate(parts, 1):
        url = part.strip()
        where = f"bus URL {url!r}" if len(parts) == 1 else f"bus URL {n} of {len(parts)} ({url!r}) in {urls!r}"
        if not url:
            raise ValueError(f"{where} is empty")
        u = urlsplit(url)
        if u.scheme not in ("ws", "wss", "http", "https"):
            raise ValueError(f"{where}: scheme must be ws or wss, not {u.scheme!r}")
        if not u.netloc:
            raise ValueError(f"{where} has no host")
        if u.netloc.endswith(":"):
            # ws://127.0.0.1:/ would dial port 80.
            fix = url.replace(u.netloc, u.netloc + str(urlsplit(DEFAULT_BUS_URL).port), 1)
            raise ValueError(f"{where} has an empty port; did you mean {fix}?")
        if u.scheme in ("http", "https"):
            url = "ws" + url[4:]
        out.append(url)
    return out
