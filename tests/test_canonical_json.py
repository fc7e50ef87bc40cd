"""The one serialisation hashes are taken over (checkpoints.hashing.canonical_json) writes the bytes
it always wrote: every stored hash, of every existing checkpoint, stays valid whichever encoder
produces them. The reference is what it was written as: `json` with sorted keys, no whitespace,
UTF-8, and `str` for anything JSON lacks."""

import dataclasses
import datetime
import json
import uuid
from decimal import Decimal

import pytest
from django.db import models
from hypothesis import given, settings as hsettings, strategies as st

from checkpoints.hashing import canonical_json


def written_as_before(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


# Floats of every magnitude, the tiny ones (which orjson and json write differently) most of all.
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e-4, max_value=1e-4, allow_nan=False),
    st.sampled_from([0.0, -0.0, 1e-4, 1e-5, -1.5e-7, 5e-324, 1e16, 1e22, 1.7976931348623157e308, 0.1]),
)
integers = st.one_of(st.integers(min_value=-(2**63), max_value=2**64 - 1), st.integers(min_value=-(10**40), max_value=10**40))
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=30)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), integers, floats, texts),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(texts, inner, max_size=5)),
    max_leaves=40,
)


@hsettings(max_examples=600, deadline=None)
@given(json_values)
def test_any_json_value_is_written_byte_for_byte_as_before(value):
    assert canonical_json(value) == written_as_before(value)


@pytest.mark.parametrize(
    "text",
    [
        # Text that looks like a tiny float after a separator: written as before either way.
        ["a,0.00001", ":1e-5"],
        {"k": "[0.0000", "t": ",2e-7"},
    ],
)
def test_text_that_looks_like_a_number_is_written_as_before(text):
    assert canonical_json(text) == written_as_before(text)


class Size(models.TextChoices):
    LARGE = "large"


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize(
    "value",
    [
        {"when": datetime.datetime(2026, 12, 5, 2, 0, tzinfo=datetime.UTC)},
        [datetime.date(2026, 12, 5), datetime.time(2, 30)],
        {"id": uuid.UUID(int=5)},
        {"amount": Decimal("1.10")},
        {"size": Size.LARGE},
        {"point": Point(1)},
        {"lone": "\ud800"},
        (1, 2, [3, (4,)]),
        {
            "deep": [
                [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
            ]
        },
    ],
    ids=["datetime", "date-time", "uuid", "decimal", "text-choice", "dataclass", "lone-surrogate", "tuples", "deep"],
)
def test_what_json_lacks_is_written_as_before(value):
    try:
        expected = written_as_before(value)
    except (UnicodeEncodeError, TypeError) as refusal:
        with pytest.raises(type(refusal)):
            canonical_json(value)
    else:
        assert canonical_json(value) == expected
