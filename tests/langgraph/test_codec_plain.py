"""questlog_client.langgraph.codec.is_plain_json decides what travels as itself: ASCII text is
judged without encoding it, and the answer is the one encoding gives for every kind of text."""

import pytest

from questlog_client.langgraph.codec import is_plain_json


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ({"note": "ascii only", "n": [1, 2.5, None, True]}, True),
        ({"note": "café ✓ 日本"}, True),
        ({"note": "nul \x00 inside"}, False),
        ({"nul \x00 key": 1}, False),
        ({"note": "lone \ud800 surrogate"}, False),
        ({"lone \udfff key": 1}, False),
        ({"note": "pair \U0001f600 is fine"}, True),
        ({"n": float("nan")}, False),
        ({"t": (1, 2)}, False),
        ({1: "non-string key"}, False),
    ],
)
def test_plain_json_is_judged_as_encoding_would(value, plain):
    assert is_plain_json(value) is plain


def plain_as_defined(value) -> bool:
    """The definition, value by value: JSON's own types exactly (no subclass, no tuple), text
    keys, finite floats, and text PostgreSQL stores (no NUL, no lone surrogate)."""
    import math

    def text_ok(text: str) -> bool:
        return "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)

    if value is None or type(value) in (bool, int):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is str:
        return text_ok(value)
    if type(value) is list:
        return all(plain_as_defined(item) for item in value)
    if type(value) is dict:
        return all(type(key) is str and text_ok(key) and plain_as_defined(item) for key, item in value.items())
    return False


def test_every_value_is_judged_as_the_definition_says():
    from hypothesis import given, settings, strategies as st

    keys = st.one_of(st.text(max_size=6), st.integers(), st.sampled_from(["\x00", "\ud800", "a\udfffb", "\U0001f600"]))
    leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8), st.sampled_from(["\x00", "\ud800x"]))
    values = st.recursive(
        leaves,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner), st.dictionaries(keys, inner, max_size=4)),
        max_leaves=20,
    )

    @settings(max_examples=1500, deadline=None)
    @given(values)
    def judged(value):
        assert is_plain_json(value) is plain_as_defined(value)

    judged()
