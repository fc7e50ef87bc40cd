"""The one serialisation that hashes are taken over, and the hash: the lowest piece of storage,
imported by the models (reference maps are addressed by it) and by everything above them."""

import hashlib
import json
from typing import Any

# Made once (`json.dumps` with arguments builds an encoder on every call): the same bytes.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_json(value: Any) -> bytes:
    """The one serialisation that hashes are taken over: sorted keys, no whitespace, UTF-8."""
    return _CANONICAL.encode(value).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
