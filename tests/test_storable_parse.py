"""A client's JSON is read by orjson where that is surely the reading json.loads gives with
quests.storable's hooks (no repeated key, numbers within range, no NaN), and by json otherwise
(`storable._parsed_quickly`): every text reads as the same value, or is refused, either way.
The reference is json.loads with the hooks, the reading every body had before."""

import json

from hypothesis import given, settings as hsettings, strategies as st

from quests import storable
from tests.test_canonical_json import floats, integers

# Text with what JSON must escape, colons (counted to find a repeated key), and any character
# but a lone surrogate (those only arrive as \u escapes, which the reference reads the same).
texts = st.text(alphabet=st.one_of(st.sampled_from(':"\\/\x00\x1f\n,{}[]'), st.characters(exclude_categories=["Cs"])), max_size=20)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), integers, floats, texts),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(texts, inner, max_size=5)),
    max_leaves=30,
)


def reference(text: str) -> tuple[str, str]:
    """json.loads with the hooks: the value (its repr: an int is not a float, -0.0 is not 0.0), or refused."""
    try:
        value = json.loads(text, parse_constant=storable._no_constant, parse_float=storable._float, parse_int=storable._int, object_pairs_hook=storable._object)
    except (ValueError, RecursionError, storable._NotJson, storable._RepeatedKey):
        return ("refused", "")
    return ("value", repr(value))


def read(text: str) -> tuple[str, str]:
    try:
        return ("value", repr(storable.parse_json(text)))
    except storable.Unstorable:
        return ("refused", "")


def written(value, style: int) -> str:
    if style == 0:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if style == 1:
        return json.dumps(value)  # \u escapes for every non-ASCII character
    return json.dumps(value, indent=2, ensure_ascii=False)


@hsettings(max_examples=800, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=2))
def test_any_json_text_reads_as_the_hooks_read_it(value, style):
    text = written(value, style)
    assert read(text) == reference(text)


@hsettings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(texts, json_values), min_size=1, max_size=6), st.data())
def test_an_object_with_a_repeated_key_is_refused_as_the_hooks_refuse_it(pairs, data):
    repeated = data.draw(st.sampled_from(pairs))[0]
    pairs = [*pairs, (repeated, data.draw(json_values))]
    text = "{" + ",".join(f"{json.dumps(key, ensure_ascii=False)}:{json.dumps(item, ensure_ascii=False)}" for key, item in pairs) + "}"
    nested = data.draw(st.sampled_from([text, f"[{text}]", '{"outer":' + text + "}"]))
    assert read(nested) == reference(nested) == ("refused", "")


@hsettings(max_examples=600, deadline=None)
@given(st.from_regex(r"\A-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,4})?\Z"))
def test_any_number_reads_as_the_hooks_read_it(number):
    """Integers of any length (orjson reads one past 64 bits as a float: those go to json), and
    floats of any precision and exponent (past a double's range both refuse)."""
    for text in (number, f"[{number}]", f'{{"n":{number}}}'):
        assert read(text) == reference(text)


def test_what_only_json_reads_right_goes_to_json():
    cases = {
        '{"a":1,"a":2}': ("refused", ""),
        '{"a:b":1,"a:b":2}': ("refused", ""),  # colons in the repeated key itself
        '{"k":"x\\u003ay","k":1}': ("refused", ""),  # an escaped colon: read by json
        "[18446744073709551616]": ("value", "[18446744073709551616]"),  # past 64 bits, exact
        "[1e400]": ("refused", ""),
        "[NaN]": ("refused", ""),
        '"\\ud800"': ("value", repr("\ud800")),  # a lone surrogate reads (check_json refuses it)
        "[" * 300 + "]" * 300: ("value", repr(json.loads("[" * 300 + "]" * 300))),  # past orjson's writer's depth
        # A float orjson writes back with a long fraction beside an integer it read as a float
        # (found by the property above).
        '{"":[-9223372036854775809],"0":1.248252341745671e-05}': ("value", "{'': [-9223372036854775809], '0': 1.248252341745671e-05}"),
        "[12345678901234567890123.5]": ("value", "[1.2345678901234568e+22]"),
    }
    for text, outcome in cases.items():
        assert read(text) == reference(text) == outcome, text


def test_digits_inside_strings_leave_the_reading_to_orjson():
    """LangGraph's channel versions are 32 zero-padded digits: a LangGraph save's body is read quickly."""
    body = json.dumps({"channel_versions": {f"k{i:02d}": f"{i:032d}.0.{i}" for i in range(20)}, "step": 3, "score": 1.5e-05})
    assert storable._parsed_quickly(body) is not storable._UNSURE
    assert read(body) == reference(body)
