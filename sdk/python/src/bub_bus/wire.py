"""Reading and writing the JSON-RPC wire while keeping payload bytes.

The bus promises subscribers the publisher's bytes for ``payload`` and
``meta`` (key order, spacing and escapes included; docs/PROTOCOL.md,
"sendMessage"). ``json.loads`` keeps key order but not the rest, so
:func:`decode` walks the members of a message and of its ``params`` with
the standard library's decoder (``JSONDecoder.raw_decode``, which reports
where each value ends) and keeps the text of those two members as it came.
Outgoing payloads given as bytes are written between the envelope's
members as they are, never re-encoded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_decoder = json.JSONDecoder()
_whitespace = " \t\n\r"

# Members of params whose text is kept: what subscribers must get as sent.
_RAW_MEMBERS = frozenset({"payload", "meta"})


@dataclass
class Message:
    """One JSON-RPC object: its members decoded, and the text of
    ``params.payload`` and ``params.meta`` as they came."""

    members: dict[str, Any]
    raw: dict[str, str] = field(default_factory=dict)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _whitespace:
        i += 1
    return i


def _expect(text: str, i: int, char: str) -> int:
    if i >= len(text) or text[i] != char:
        found = repr(text[i]) if i < len(text) else "the end"
        raise ValueError(f"expected {char!r} at offset {i}, found {found}")
    return i + 1


def _walk(text: str, i: int, raw: dict[str, str], top: bool) -> tuple[dict[str, Any], int]:
    """Decodes the object at text[i:] and returns its members and the
    offset after it. At the top it descends into params; in params it
    records the text of payload and meta in raw."""
    members: dict[str, Any] = {}
    i = _skip(text, _expect(text, _skip(text, i), "{"))
    if i < len(text) and text[i] == "}":
        return members, i + 1
    while True:
        key, i = _decoder.raw_decode(text, i)
        if not isinstance(key, str):
            raise ValueError(f"object key before offset {i} is not a string")
        i = _skip(text, _expect(text, _skip(text, i), ":"))
        start = i
        if top and key == "params" and text.startswith("{", i):
            members[key], i = _walk(text, i, raw, False)
        else:
            members[key], i = _decoder.raw_decode(text, i)
            if not top and key in _RAW_MEMBERS:
                raw[key] = text[start:i]
        i = _skip(text, i)
        if i < len(text) and text[i] == ",":
            i = _skip(text, i + 1)
            continue
        return members, _expect(text, i, "}")


def decode(text: str) -> list[Message]:
    """Decodes one WebSocket text message: a JSON-RPC object, or a batch of
    them. Raises ValueError when it is not JSON or not objects."""
    start = _skip(text, 0)
    if text.startswith("[", start):
        items = json.loads(text)
        return [Message(item) for item in items if isinstance(item, dict)]
    raw: dict[str, str] = {}
    members, end = _walk(text, start, raw, True)
    if _skip(text, end) != len(text):
        raise ValueError(f"data after the JSON object at offset {end}")
    return [Message(members, raw)]


def dumps(value: Any) -> str:
    """Encodes value compactly, keeping non-ASCII text as it is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


JSONValue = Mapping[str, Any] | bytes | bytearray | memoryview | str
"""An object to encode, or raw JSON (bytes or str) written as it is."""


def encode_object(value: JSONValue, what: str) -> str:
    """Returns value as the text of a JSON object: raw JSON (bytes or str)
    as it is once checked, a mapping encoded. Raises ValueError or
    TypeError naming what."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{what} is not UTF-8: {e}") from None
    elif isinstance(value, str):
        text = value
    elif isinstance(value, Mapping):
        return dumps(value)
    else:
        raise TypeError(f"{what} must be a mapping or raw JSON bytes, not {type(value).__name__}")
    # Surrounding whitespace is not the value's, and the bus would count
    # it against its limit.
    text = text.strip(_whitespace)
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{what} must be a JSON object, not {type(parsed).__name__}")
    return text


def splice(head: Mapping[str, Any], body: str) -> str:
    """Returns the JSON object body (its text) with head's members first,
    written as body is: an envelope around a spec without re-encoding it."""
    inner = body[1:].lstrip(_whitespace)
    head_text = dumps(dict(head))[:-1]
    if inner.startswith("}"):
        return head_text + "}"
    return head_text + "," + inner
