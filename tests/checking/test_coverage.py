"""Sets of choice combinations (checking/coverage.py) against Python sets of listed ones."""

import itertools
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.oracle import describe_combinations

from tspec.checking.coverage import ChoiceSpace

OPTIONS = {"a": ("x", "y", "z"), "b": ("p", "q"), "c": ("u", "v"), "d": ("s", "t", "w")}


def listed(space: ChoiceSpace) -> list[dict]:
    return [dict(zip(space.names, values)) for values in itertools.product(
        *(OPTIONS[n] if len(space.values[space.level_of[n]]) > 1 else
          space.values[space.level_of[n]] for n in space.names))]


_Spec = SimpleNamespace(   # what describe_combinations reads of a spec: the options in order
    choices={name: SimpleNamespace(options=options) for name, options in OPTIONS.items()})
selections = st.dictionaries(st.sampled_from(sorted(OPTIONS)),
                             st.sampled_from(["x", "y", "z", "p", "q", "u", "v", "s", "t", "w"]),
                             max_size=3)
# a set built from selections by the operations the checker uses
terms = st.recursive(
    selections.map(lambda sel: ("cube", sel)),
    lambda inner: st.tuples(st.sampled_from(["|", "&", "-"]), inner, inner), max_leaves=8)


def build(space, term):
    if term[0] == "cube":
        return space.matching(term[1])
    op, a, b = term
    a, b = build(space, a), build(space, b)
    return a | b if op == "|" else a & b if op == "&" else a - b


def plain(term, combos):
    if term[0] == "cube":
        return {i for i, c in enumerate(combos) if all(c.get(k) == v for k, v in term[1].items())}
    op, a, b = term
    a, b = plain(a, combos), plain(b, combos)
    return a | b if op == "|" else a & b if op == "&" else a - b


@settings(max_examples=300, deadline=None, derandomize=True)
@given(terms, st.sampled_from([None, "b", "d"]))
def test_a_cover_is_the_set_its_operations_make(term, first):
    space = ChoiceSpace(OPTIONS, first=first)
    combos = list(space)
    assert len(combos) == len(space) == 36
    assert [space[i] for i in range(len(space))] == combos
    cover = build(space, term)
    expected = plain(term, combos)
    assert [combos.index(c) for c in cover] == sorted(expected)     # in the space's order
    assert len(cover) == len(expected)
    assert bool(cover) == bool(expected)
    assert all((c in cover) == (i in expected) for i, c in enumerate(combos))
    assert cover.first() == (combos[min(expected)] if expected else None)
    if expected:
        present = [combos[i] for i in sorted(expected)]
        assert cover.describe(OPTIONS) == describe_combinations(present, combos, _Spec)
    # equal sets are one node: equality is identity
    assert build(space, ("|", term, term)) == cover
    assert (cover | space.everything) == space.everything and not (cover - cover)




def test_a_space_of_billions_is_counted_and_indexed_without_listing():
    options = {f"c{i}": ("a", "b") for i in range(40)}
    space = ChoiceSpace(options)
    assert len(space) == 1 << 40
    assert space[0] == {name: "a" for name in options}
    assert space[-1] == {name: "b" for name in options}
    assert space[5] == {**{name: "a" for name in options}, "c37": "b", "c39": "b"}
    cover = space.matching({"c0": "b"}) | space.matching({"c1": "b", "c2": "a"})
    assert len(cover) == (1 << 39) + (1 << 37)
    assert cover.describe() == "687194767360 of 1099511627776 combinations"
    assert space.matching({"c3": "b"}).describe() == "c3=b"
    assert space.matching({"c3": "z"}) == space.nothing
    assert space.matching({"nope": "a"}) == space.nothing
    with pytest.raises(IndexError):
        space[1 << 40]


def test_the_most_significant_choice_orders_the_space():
    space = ChoiceSpace({"a": ("x", "y"), "decoding": ("step", "full")}, first="decoding")
    assert list(space) == [{"a": "x", "decoding": "step"}, {"a": "y", "decoding": "step"},
                           {"a": "x", "decoding": "full"}, {"a": "y", "decoding": "full"}]
    assert space.matching({"decoding": "full"}).first() == {"a": "x", "decoding": "full"}
