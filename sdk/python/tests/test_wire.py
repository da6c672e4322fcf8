"""The wire reader keeps payload and meta text as sent."""

from __future__ import annotations

import pytest

from bub_bus import Result, Retry, wire


@pytest.mark.parametrize(
    "text, payload, meta",
    [
        ('{"method":"processMessage","id":1,"params":{"payload":{"type":"t"}}}', '{"type":"t"}', None),
        ('{"params" : { "meta" :{"a" : 1} , "payload": {"type":"t", "z":[1, {"b":"\\u00e9"}], "a":null} } ,"id":2}', '{"type":"t", "z":[1, {"b":"\\u00e9"}], "a":null}', '{"a" : 1}'),
        ('\n{"id":3,"params":{"payload":{"type":"\\"}{"}}}\n', '{"type":"\\"}{"}', None),
        ('{"id":4,"params":{"nested":{"payload":{"x":1}},"payload":{"type":"é"}}}', '{"type":"é"}', None),
    ],
)
def test_decode_keeps_raw_members(text: str, payload: str, meta: str | None) -> None:
    (m,) = wire.decode(text)
    assert m.raw["payload"] == payload
    assert m.raw.get("meta") == meta
    assert m.members["params"]["payload"] == wire.json.loads(payload)


@pytest.mark.parametrize("text", ["", "{", '{"a":1,}', '{"a" 1}', "{1:2}", '{"a":1} x', "nul", '{"params":{"payload":{]}}'])
def test_decode_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        wire.decode(text)


def test_decode_batch_and_encode() -> None:
    assert [m.members for m in wire.decode('[{"id":1},2,{"id":3}]')] == [{"id": 1}, {"id": 3}]
    assert wire.encode_object(b' {"type": "t"}\n', "payload") == '{"type": "t"}'
    assert wire.encode_object({"type": "t", "é": 1}, "payload") == '{"type":"t","é":1}'
    with pytest.raises(ValueError, match="payload must be a JSON object"):
        wire.encode_object(b"[1]", "payload")
    with pytest.raises(ValueError, match="payload is not valid JSON"):
        wire.encode_object(b"{", "payload")
    with pytest.raises(TypeError):
        wire.encode_object(42, "payload")  # type: ignore[arg-type]
    assert wire.splice({"type": "q"}, '{ "category": 1}') == '{"type":"q","category": 1}'
    assert wire.splice({"type": "q"}, "{ }") == '{"type":"q"}'


@pytest.mark.parametrize("after", [float("nan"), float("inf"), float("-inf")])
def test_retry_after_must_be_finite(after: float) -> None:
    # json.dumps would write NaN or Infinity: not JSON, and the bus would
    # drop the answer.
    with pytest.raises(ValueError, match=rf"retry_after {after!r}: want a finite number of seconds"):
        Result(should_retry=True, retry_after=after)
    with pytest.raises(ValueError, match=rf"retry_after {after!r}"):
        Retry("later", after=after)
    assert wire.dumps(Result(should_retry=True, retry_after=1.5).wire()) == (
        '{"processed":false,"should_retry":true,"retry_seconds":1.5,"reject":false,"message":"","stopPropagation":false}'
    )
