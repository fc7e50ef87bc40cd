"""JSON written a piece at a time, whatever its depth, for answers too large to hold whole (the
data export).

The standard library cannot do this: its `indent` encoder recurses once per level and stops near
1,000 levels of Python's stack (a stored agent state nested that deep made every export fail),
and it takes only lists, so a whole history would sit in memory first. Here an explicit stack
replaces recursion, and any iterator (a generator over a queryset's `.iterator()`) is written as
an array while it is consumed. Strings, numbers and the rest still go through `json`'s own
functions, so every value is spelled as json.dumps spells it.
"""

import json
from collections.abc import Callable, Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

# Levels past this are written on one line: indentation grows with the depth, so a value nested
# thousands of levels deep would otherwise take space in the square of its depth. The export's
# own structure and any value within quests.limits.JSON_DEPTH_MAX stay indented.
INDENTED_LEVELS = 128
# What one chunk of a streamed answer holds, at least (the last one excepted).
CHUNK_CHARACTERS = 64 * 1024

_encode_string = json.encoder.encode_basestring  # the C version when it is there, as ensure_ascii=False


class RawJson(str):
    """JSON text already written (a checkpoint's stored part, kept as canonical JSON): written as
    it is, never parsed, so its depth costs nothing."""


# One encoder for every call: its default() keeps no state.
_DJANGO_DEFAULT = DjangoJSONEncoder().default


def iter_json(value: Any, *, indent: int = 2, default: Callable[[Any], Any] = _DJANGO_DEFAULT) -> Iterator[str]:
    """`value` as JSON text in chunks of about CHUNK_CHARACTERS, laid out as json.dumps(value,
    indent=indent, ensure_ascii=False) lays it out. Dicts, lists, tuples and iterators nest to
    any depth; anything else json cannot write goes through `default` (Django's: dates, times,
    decimals, UUIDs)."""
    buffer: list[str] = []
    size = 0
    for piece in _pieces(value, indent, default):
        buffer.append(piece)
        size += len(piece)
        if size >= CHUNK_CHARACTERS:
            yield "".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer)


def _pieces(value: Any, indent: int, default: Callable[[Any], Any]) -> Iterator[str]:
    # One frame per open container: [its items, its closing bracket, whether it is an object,
    # whether it is still empty].
    stack: list[list[Any]] = []
    pending = value
    while True:
        if isinstance(pending, dict):
            yield "{"
            stack.append([iter(pending.items()), "}", True, True])
        elif isinstance(pending, (list, tuple, Iterator)):
            yield "["
            stack.append([iter(pending), "]", False, True])
        elif isinstance(pending, RawJson):
            yield pending
        else:
            scalar = _scalar(pending)
            if scalar is None:
                pending = default(pending)  # a str, usually; written on the next turn
                continue
            yield scalar
        # The next value to write, after the separators before it and the brackets closed before.
        while stack:
            frame = stack[-1]
            item: Any = next(frame[0], _END)
            if item is _END:
                stack.pop()
                yield (_newline(len(stack), indent) if not frame[3] else "") + frame[1]
                continue
            yield ("," if not frame[3] else "") + _newline(len(stack), indent)
            frame[3] = False
            if frame[2]:
                key, pending = item
                yield _key(key) + ": "
            else:
                pending = item
            break
        else:
            return


_END = object()


def _newline(level: int, indent: int) -> str:
    return "\n" + " " * (indent * level) if level <= INDENTED_LEVELS else ""


def _scalar(value: Any) -> str | None:
    if isinstance(value, str):
        return _encode_string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return json.dumps(value)  # json's own spelling of floats
    return None


def _key(key: Any) -> str:
    # As json.dumps does: a number, true, false or null key becomes its JSON text, as a string.
    return _encode_string(key if isinstance(key, str) else (_scalar(key) or str(key)))
