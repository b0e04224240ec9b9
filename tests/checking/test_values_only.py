"""A variant's sizes checked after a clean proof (``check(..., proved=)``) against the full
evaluation of every shape at those sizes: the same findings, for the shipped variants and
for their sizes changed at random (constraints broken, derived dims made fractional, a
position table too short)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tspec
from tspec import shipped
from tspec.checking.check import check

VARIANTS = sorted(shipped.builtin_variants())


def both_ways(variant, dims):
    spec = variant.spec
    proof = check(spec, variant.choices)
    assert proof.ok
    full = check(spec, variant.choices, dims)
    spared = check(spec, variant.choices, dims, proved=proof)
    assert [f.text() for f in spared.findings] == [f.text() for f in full.findings]
    return full


@pytest.mark.parametrize("name", VARIANTS)
def test_a_shipped_variant_at_its_sizes(name):
    variant = tspec.api.load(name)
    assert both_ways(variant, variant.dims).ok


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.sampled_from(VARIANTS), st.data())
def test_a_shipped_variant_at_other_sizes(name, data):
    variant = tspec.api.load(name)
    names = sorted(variant.dims)
    changed = data.draw(st.dictionaries(st.sampled_from(names), st.integers(1, 96),
                                        min_size=1, max_size=3))
    both_ways(variant, variant.dims | changed)


def test_broken_sizes_are_found_either_way():
    # the check is spared only where nothing can be found: a broken constraint is reported
    variant = tspec.api.load("base")
    found = both_ways(variant, variant.dims | {"H": 7})
    assert [f.kind for f in found.findings] == ["constraint-violated"]


def test_a_time_limit_at_any_place_the_checker_reaches_is_said_in_one_line(monkeypatch):
    # the sizes' evaluation once marked a tensor's row as the place reached, and the error
    # for it failed (a row has no equation): an internal error instead of the time limit's
    from tspec.checking import limits
    from tspec.checking.check import TensorRow
    from tspec.errors import LimitError
    row = TensorRow("encoder.layers[i].A", "output", None, "float", "", True, "", "x.tspec", 7)
    real = limits.time.monotonic
    with limits.time_limit(60):
        monkeypatch.setattr(limits.time, "monotonic", lambda: real() + 3600)
        with pytest.raises(LimitError) as raised:
            limits.reached(row)
    assert (raised.value.file, raised.value.line) == ("x.tspec", 7)
    assert "encoder.layers[i].A" in str(raised.value)


def test_a_check_inside_a_commands_phase_leaves_the_phase_named(monkeypatch):
    # `tspec run --decode` checks the decoding step while it decodes: a limit past that check
    # blamed the check ("the check stopped ... at probs = softmax(...)"), which was done
    from tspec.checking import limits
    from tspec.errors import LimitError
    variant = tspec.api.load("base")
    real = limits.time.monotonic
    with limits.time_limit(60, "tspec run"):
        limits.doing("decoding with base")
        check(variant.spec, variant.choices)
        monkeypatch.setattr(limits.time, "monotonic", lambda: real() + 3600)
        with pytest.raises(LimitError) as raised:
            limits.tick()
    assert str(raised.value).startswith("tspec run stopped at its time limit of 60 s, decoding "
                                        "with base; give it longer")
