"""A capabilities answer (core/extension.Capabilities) is read liberally: whatever JSON a server
sends, the client gets capabilities and no exception; a key it does not know is ignored, a
value other than true means no, and another extension's answer means none."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from git_xet.core.extension import Capabilities

NAMES = list(Capabilities._fields)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


@given(st.fixed_dictionaries({}, optional={name: st.booleans() for name in NAMES}), st.dictionaries(st.text(max_size=12).filter(lambda k: k not in NAMES), JSON, max_size=4))
def test_an_answer_lists_exactly_the_capabilities_set_to_true(flags: dict[str, bool], unknown: dict[str, object]) -> None:
    answer = {**unknown, "extension": "git-xet", "version": 1, **flags}
    parsed = Capabilities.from_json(answer)
    assert {name for name in NAMES if getattr(parsed, name)} == {name for name, on in flags.items() if on}
    assert Capabilities.from_json(parsed.to_json()) == parsed


@given(JSON)
def test_any_other_answer_means_none(answer: object) -> None:
    parsed = Capabilities.from_json(answer)
    if not (isinstance(answer, dict) and answer.get("extension") == "git-xet"):
        assert parsed == Capabilities()


@given(st.sampled_from(NAMES), JSON.filter(lambda v: v is not True))
def test_a_value_other_than_true_means_no(name: str, value: object) -> None:
    assert not getattr(Capabilities.from_json({"extension": "git-xet", name: value}), name)
