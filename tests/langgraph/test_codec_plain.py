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
