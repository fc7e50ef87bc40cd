"""The one serialisation that hashes are taken over, and the hash: the lowest piece of storage,
imported by the models (reference maps are addressed by it) and by everything above them."""

import hashlib
import json
import re
from typing import Any

import orjson

# What every stored hash was taken over: json with sorted keys, no whitespace, UTF-8, and str()
# for anything JSON lacks. Made once (`json.dumps` with arguments builds an encoder on every call).
_AS_WRITTEN = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)

# orjson writes the same bytes ten times faster, for JSON's own values, with two exceptions taken
# back to _AS_WRITTEN:
# - a float below 1e-4 in magnitude (json: 1e-05, orjson: 0.00001 or 1e-5). In orjson's bytes it
#   is a number just after a separator that starts 0.0000 or has a negative exponent; text that
#   looks so (",1e-5" inside a string) only takes the longer way.
# - anything JSON lacks (a datetime, a Decimal, a subclass of str, int, dict or list such as a
#   TextChoices member, an integer past 64 bits, a lone surrogate): orjson refuses it here.
# A plain Enum (none is hashed anywhere: hashed values are JSON a client sent, or storage's own
# serialisers' output) would be written by its value, not its str().
_TINY_FLOAT = re.compile(rb"(?:^|[:,\[])-?(?:0\.0000|[0-9.]+e-)")
_PLAIN_ONLY = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS


def _not_plain(value: Any) -> Any:
    raise TypeError


def canonical_json(value: Any) -> bytes:
    """The one serialisation that hashes are taken over: sorted keys, no whitespace, UTF-8."""
    try:
        written = orjson.dumps(value, default=_not_plain, option=_PLAIN_ONLY)
    except TypeError:  # orjson.JSONEncodeError is one
        return _AS_WRITTEN.encode(value).encode()
    # The substring tests spare most values the pattern's scan, which costs more than orjson.
    if (b".0000" not in written and b"e-" not in written) or _TINY_FLOAT.search(written) is None:
        return written
    return _AS_WRITTEN.encode(value).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
