"""What any text or JSON value a client sends must keep to, in one place.

PostgreSQL refuses a NUL character in text and in jsonb, UTF-8 cannot encode a lone surrogate,
jsonb and every JSON reader refuse NaN and Infinity (and a number past a double's range reads back
as Infinity, or not at all), and a value nested without bound breaks whoever reads it back with a
recursive reader (the export, a client's parser). So:

- no string and no object key holds a NUL character or a lone surrogate;
- every number is finite and within a double's range (at most about 1.8e308 either way);
- a JSON value nests at most `quests.limits.JSON_DEPTH_MAX` levels: each object or array counts
  one level, the value itself included (`1` is 0 levels, `{}` 1, `{"a": [1]}` 2);
- an object names each key once.

One rule for every way in: the API's bodies (`quests.api.StorableJsonParser`) and their free JSON
fields (`quests.api.schemas.JsonObject`), the LangGraph `filter`, the JSON typed into a page
(`quests.forms`) and the pages' search boxes (`quests.web.pages.search_text`). Each caller says
the refusal its own way (a JSON 400 or 422, a form error) but never refuses differently. Text
typed into a page's other fields needs nothing more: Django's CharField refuses a NUL character
itself, and Django decodes form and query data with replacement, so no lone surrogate arrives.
"""

import json
import math
import sys
from typing import Any

import orjson

from quests.limits import JSON_DEPTH_MAX

# The largest magnitude every JSON reader holds as a finite number (an IEEE 754 double).
NUMBER_MAX = sys.float_info.max
# No integer within NUMBER_MAX has more digits (309, and a sign): longer text is refused unread,
# before Python's int() refuses it with an error of its own (past 4,300 digits).
_NUMBER_MAX_CHARACTERS = len(str(int(NUMBER_MAX))) + 1


class Unstorable(ValueError):
    """Why a client's text or JSON cannot be kept, as a sentence for a person. `path` says where
    in a JSON value (dotted keys and indexes; a repeated key: the key), or None for the value
    itself or the text as a whole."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


TEXT_PROBLEM = "may not contain a NUL character (\\u0000) or a lone surrogate."


def text_rule(subject: str = "Text") -> str:
    return f"{subject} {TEXT_PROBLEM}"


def is_storable_text(text: str) -> bool:
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False  # a lone surrogate
    return True


def check_text(text: str, *, subject: str = "Text") -> str:
    """`text`, if PostgreSQL can store it; else Unstorable."""
    if not is_storable_text(text):
        raise Unstorable(text_rule(subject))
    return text


def check_json(value: Any, *, subject: str = "The value", max_depth: int | None = JSON_DEPTH_MAX) -> Any:
    """`value` (a parsed JSON value), if it keeps to the rule; else Unstorable naming where (a
    bad key by the object that holds it). `max_depth=None` leaves depth to the caller: the API's
    body parser walks a whole body, whose free values its schemas hold to the limit one by one.

    Walked with a stack of its own, not by recursion: a value nested far past the limit is
    refused, not a RecursionError. Every checkpoint write walks its agent state, so the common
    leaves (strings, containers) are judged inline and only the rest by _leaf_problem."""
    if (type(value) is dict or type(value) is list) and _plainly_storable(value, max_depth):
        return value
    problem = _leaf_problem(value)
    if problem is not None:
        raise Unstorable(f"{subject} {problem}")
    if not isinstance(value, (dict, list, tuple)):
        return value
    # (container, its depth, where it is: (where its parent is, its key), or None for the value)
    stack: list[tuple[Any, int, Any]] = [(value, 1, None)]
    while stack:
        item, depth, where = stack.pop()
        if max_depth is not None and depth > max_depth:
            raise Unstorable(f"{subject} nests deeper than {max_depth} levels.", path=_dotted(where))
        is_object = isinstance(item, dict)
        for key, child in item.items() if is_object else enumerate(item):
            if is_object and not (type(key) is str and is_storable_text(key)):
                raise Unstorable(text_rule(subject), path=_dotted(where))
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1, (where, key)))
            elif kind is str:
                if not is_storable_text(child):
                    raise Unstorable(text_rule(subject), path=_dotted((where, key)))
            elif isinstance(child, (dict, list, tuple)):
                stack.append((child, depth + 1, (where, key)))
            elif (problem := _leaf_problem(child)) is not None:
                raise Unstorable(f"{subject} {problem}", path=_dotted((where, key)))
    return value


def check_depth(value: Any, *, subject: str = "The value", max_depth: int = JSON_DEPTH_MAX) -> Any:
    """`value`, if it nests at most `max_depth` levels; else Unstorable naming where. Only for a
    value parsed from JSON whose text and numbers were held to the rule already (by parse_json and
    a look at the text it came from, or by check_json with max_depth=None): only its containers are
    walked, level by level, which is what every checkpoint's agent state costs through the API.
    Anything else (a scalar, or a container JSON does not have) takes check_json's whole walk."""
    if type(value) is not dict and type(value) is not list:
        return check_json(value, subject=subject, max_depth=max_depth)
    level, depth = [value], 1
    while level:
        if depth > max_depth:
            return check_json(value, subject=subject, max_depth=max_depth)  # refuses it, saying where
        deeper = []
        for item in level:
            for child in item.values() if type(item) is dict else item:
                kind = type(child)
                if kind is dict or kind is list:
                    deeper.append(child)
                elif kind is tuple:
                    return check_json(value, subject=subject, max_depth=max_depth)
        level, depth = deeper, depth + 1
    return value


_ONLY_TEXT = {str}


def _plainly_storable(value: dict | list, max_depth: int | None) -> bool:
    """Whether `value` keeps to the rule, judged quickly: True only when it surely does. Every key
    and string is gathered and judged at once, and every other leaf inline; anything unusual (a
    problem, or a type other than JSON's own) is False, and check_json's walk then finds what is
    wrong, where, with its words. Every checkpoint's agent state passes here."""
    texts: list[str] = []
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if max_depth is not None and depth > max_depth:
            return False
        if type(item) is dict:
            if not set(map(type, item)) <= _ONLY_TEXT:
                return False
            texts.extend(item)
            children = item.values()
        else:
            children = item
        for child in children:
            kind = type(child)
            if kind is str:
                texts.append(child)
            elif kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind is float:
                if not math.isfinite(child):
                    return False
            elif kind is int:
                if not -NUMBER_MAX <= child <= NUMBER_MAX:
                    return False
            elif child is not None and kind is not bool:
                return False
    return is_storable_text("".join(texts))


def may_escape(text: str) -> bool:
    """Whether JSON text holds a \\u escape: the only way unstorable text (a NUL, a lone surrogate)
    can arrive once `decoded` has read it. Most bodies hold no backslash at all, which one pass
    finds several times faster than a search for the two characters (~10 µs for 12 KB)."""
    return "\\" in text and "\\u" in text


def decoded(body: bytes, *, subject: str = "The JSON") -> str:
    """A JSON text sent as bytes, as text: in the encoding JSON allows (UTF-8, or UTF-16 or 32 by
    its first bytes), strictly. json.loads would decode a surrogate's bytes into a lone surrogate
    (it decodes with surrogatepass): here they are refused, so that a lone surrogate can only
    arrive as a \\u escape, where the parser looks for it."""
    try:
        return body.decode(json.detect_encoding(body))
    except UnicodeDecodeError:
        raise Unstorable(f"{subject} is not UTF-8 text.") from None


def parse_json(text: str | bytes, *, subject: str = "The JSON", max_depth: int | None = None) -> Any:
    """The JSON value `text` spells, if it is JSON every reader takes (numbers within range, no
    repeated key); its strings and depth are for check_json. Else Unstorable.
    `max_depth` is only for the words of the refusal of text nested past what json.loads
    follows (about 1,500 levels)."""
    if isinstance(text, bytes):
        text = decoded(text, subject=subject)
    if (value := _parsed_quickly(text)) is not _UNSURE:
        return value
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_float, parse_int=_int, object_pairs_hook=_object)
    except _NotJson as exc:
        raise Unstorable(f"{subject} holds {exc}") from None
    except _RepeatedKey as exc:
        raise Unstorable(f"{subject} repeats the key {exc.key!r}.", path=exc.key) from None
    except RecursionError:
        too_deep = f"{subject} nests deeper than {max_depth} levels." if max_depth else f"{subject} nests too deeply."
        raise Unstorable(too_deep) from None
    except json.JSONDecodeError as exc:
        raise Unstorable(f"{subject} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).") from None


def json_value(text: str | bytes, *, subject: str = "The JSON") -> Any:
    """The JSON value a client typed or sent as text, held to the whole rule."""
    return check_json(parse_json(text, subject=subject, max_depth=JSON_DEPTH_MAX), subject=subject)


def _leaf_problem(value: Any) -> str | None:
    """What is wrong with a value that is not a container, as the end of a sentence; or None."""
    if isinstance(value, str):
        return None if is_storable_text(value) else TEXT_PROBLEM
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list, tuple)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"holds {_not_a_number(repr(value))}"
    if isinstance(value, int):
        # str() of an integer past 4,300 digits raises: such a one is only said to be an integer.
        return None if -NUMBER_MAX <= value <= NUMBER_MAX else f"holds {_out_of_range(str(value) if value.bit_length() < 4096 else 'an integer')}"
    return f"holds a Python {type(value).__name__}, which is not a JSON value."


def _dotted(where: Any) -> str | None:
    if where is None:
        return None
    keys: list[str] = []
    while where is not None:
        where, key = where
        keys.append(str(key))
    return ".".join(reversed(keys))


def _not_a_number(text: str) -> str:
    return f"{text}, which is not a JSON number."


def _out_of_range(text: str) -> str:
    shown = text if len(text) <= 24 else f"{text[:12]}… ({len(text)} characters)"
    return f"{shown}, a number past what JSON readers hold (about 1.8e308)."


# orjson's parse, where it is surely json's with the hooks below: a third of the time, most of it
# in C (every agent request's body comes through here).
_UNSURE = object()
_DIGITS_AS_ZEROS = bytes.maketrans(b"123456789", b"000000000")
# orjson reads an integer past 64 bits as a float: no integer of fewer digits is past them.
_LONG_NUMBER = b"0" * 19


def _parsed_quickly(text: str) -> Any:
    """The value orjson reads in `text` when it is surely the one json.loads reads with the hooks
    below, else _UNSURE (json then reads it, and words any refusal). Unsure: text with a \\u escape
    (it may spell a lone surrogate, or hide a colon from the count below), anything orjson refuses
    (NaN, Infinity, a number past a double's range, text that is not JSON), a repeated key, which
    orjson reads as its last value (every colon in JSON text is a key's or is inside a string, and
    orjson writes every colon of a string as it is, so the value written again has fewer colons
    than the text exactly when a key was repeated), and an integer past 64 bits, which orjson reads
    as a float (its digits are not written back). Digits inside strings, such as LangGraph's
    zero-padded channel versions, are written back and leave the reading to orjson."""
    if may_escape(text):
        return _UNSURE
    raw = text.encode()
    try:
        value = orjson.loads(raw)
        written = orjson.dumps(value)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):  # the encoder's own limit: 254 levels
        return _UNSURE
    if written.count(b":") != raw.count(b":"):
        return _UNSURE
    # Runs can only be lost as the value is written back, never gained: text without one is sure.
    if (runs := _long_digit_runs(raw)) and runs != _long_digit_runs(written):
        return _UNSURE
    return value


def _long_digit_runs(text: bytes) -> int:
    """Runs of 19 digits in JSON text, but those just after a decimal point. orjson writes every
    string and integer back with its digits, and a float's whole part with 16 at most (past that,
    with an exponent); so a run the text holds and the value written back does not was an integer
    read as a float (or a float's long whole part: unsure all the same). Only a fraction of a float
    may grow a run as it is written again (1.2e-05 as 0.000012), and it follows its point."""
    digits = text.translate(_DIGITS_AS_ZEROS)
    return digits.count(_LONG_NUMBER) - digits.count(b"." + _LONG_NUMBER)


# json.loads's hooks. Their exceptions pass through json.loads as they are; parse_json words them.


class _NotJson(Exception):
    pass


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_constant(constant: str) -> Any:
    raise _NotJson(_not_a_number(constant))


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 overflows to infinity
        raise _NotJson(_out_of_range(text))
    return value


def _int(text: str) -> int:
    if len(text) > _NUMBER_MAX_CHARACTERS or abs(value := int(text)) > NUMBER_MAX:
        raise _NotJson(_out_of_range(text))
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON leaves a repeated key to the reader (Python keeps the last one): a value that says two
    # things about one key is refused rather than guessed at.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return obj
