"""How LangGraph's values travel to Questlog and back.

A value that is plain JSON (and that PostgreSQL can store as text) travels as itself, so people read
it on the mission page: {"type": "json", "data": value}. Anything else (messages, tuples, bytes,
datetimes…) goes through the saver's serializer (`serde.dumps_typed`) and travels as
{"type": <its type>, "data": <base64>}. A channel LangGraph versioned without a value is
{"type": "empty"}: it reads back as no value."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

JSON = "json"
EMPTY = "empty"
# Where a checkpoint's or a metadata value's non-JSON fields travel, encoded.
TYPED_FIELDS = "__questlog_typed__"


def is_plain_json(value: Any) -> bool:
    """True when `value` comes back from JSON exactly as it went in (no tuples, no non-string keys,
    no NaN, no NUL characters or lone surrogates, which PostgreSQL refuses). Iterative: a deep value
    cannot exhaust the stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or type(item) in (bool, int):
            continue
        if type(item) is float:
            if not math.isfinite(item):
                return False
        elif type(item) is str:
            if not _storable(item):
                return False
        elif type(item) is list:
            stack.extend(item)
        elif type(item) is dict:
            for key, child in item.items():
                if type(key) is not str or not _storable(key):
                    return False
                stack.append(child)
        else:
            return False
    return True


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    if text.isascii():
        # Most keys and values: ASCII holds no surrogate, so there is nothing to encode to know.
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode(serde: SerializerProtocol, value: Any) -> dict[str, Any]:
    if is_plain_json(value):
        return {"type": JSON, "data": value}
    kind, data = serde.dumps_typed(value)
    return {"type": kind, "data": base64.b64encode(data).decode("ascii")}


def decode(serde: SerializerProtocol, item: dict[str, Any]) -> Any:
    kind: Any = item.get("type")  # the serializer's own type name, passed on as written
    if kind == JSON:
        return item.get("data")
    return serde.loads_typed((kind, base64.b64decode(item.get("data") or "")))


def is_empty(item: dict[str, Any]) -> bool:
    return item.get("type") == EMPTY


def encode_fields(serde: SerializerProtocol, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A dict whose plain-JSON fields stay readable (and filterable: metadata) and whose other
    fields are encoded under one reserved key."""
    plain = {key: value for key, value in fields.items() if key != TYPED_FIELDS and is_plain_json({key: value})}
    typed = {key: encode(serde, value) for key, value in fields.items() if key not in plain}
    if typed:
        plain[TYPED_FIELDS] = typed
    return plain


def decode_fields(serde: SerializerProtocol, fields: dict[str, Any]) -> dict[str, Any]:
    decoded = {key: value for key, value in fields.items() if key != TYPED_FIELDS}
    for key, item in (fields.get(TYPED_FIELDS) or {}).items():
        decoded[key] = decode(serde, item)
    return decoded


def jsonable(value: Any) -> Any:
    """A plain-JSON rendering of any value, for what a person reads (an approval's payload)."""
    if is_plain_json(value):
        return value
    if isinstance(value, dict):
        return {str(key): jsonable(child) for key, child in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(child) for child in value]
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump())
    if isinstance(value, float):
        return str(value)
    return str(value).replace("\x00", "")


def first_text(value: Any, *, limit: int = 200) -> str:
    """The first non-blank text in a graph's input ({"request": "Plan the offsite"} → "Plan the
    offsite"): what a new thread's mission is titled after."""
    stack = [value]
    while stack:
        item = stack.pop(0)
        if isinstance(item, str) and item.strip() and _storable(item):
            return item.strip()[:limit]
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "content"):
            stack.append(item.content)
    return ""


def json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)
