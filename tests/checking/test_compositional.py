"""The proof under every choice at once against its oracle, each combination checked alone.

`tspec check` proves each body once for each way of setting the choices it reads, and marks
what it finds with the combinations that way stands for (checking/coverage.py): it never
lists the combinations. Checking each combination on its own (``exhaustive``) is the slow,
plain path; both must give the same findings (kind, line, message, counterexample), each in
exactly the same combinations, for generated specs of random choice structure (choices read
in nested `when`s, in blocks, behind calls with and without a declared shape, with mistakes
under some branches), for the mutations of the built-in spec and for every shipped variant.
"""

import math
import re

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from support.oracle import describe_combinations
from support.specs import with_more_choices

import tspec
from tspec import shipped
from tspec.checking.check import check, combinations
from tspec.language.model import DECODING, decodes

from .test_mutations import BASE, CORPUS, mutated


def identity(finding) -> tuple:
    counterexample = tuple(sorted((finding.counterexample or {}).items()))
    return finding.kind, finding.line, finding.message, counterexample


def checked_space(parsed, fixed=None, values=None):
    """The combinations a check under every choice but ``fixed`` proves: a spec's decoding
    step comes with its full model and the other way round (a variant's sizes are judged in
    the model it runs alone)."""
    fixed = dict(fixed or {})
    if decodes(parsed) and DECODING in fixed and not values:
        del fixed[DECODING]
    return combinations(parsed, fixed)


def exhaustive(parsed, fixed=None, values=None) -> dict[tuple, list[tuple]]:
    """The oracle: each combination checked alone; a finding belongs to the combination when
    it holds there (not only in the decoding partner a combination is checked with)."""
    found: dict[tuple, list[tuple]] = {}
    for combo in checked_space(parsed, fixed, values):
        for finding in check(parsed, combo, values).findings:
            if combo in finding.combinations:
                found.setdefault(identity(finding), []).append(tuple(combo.items()))
    return found


def together_index(findings) -> dict[tuple, list[tuple]]:
    return {identity(f): [tuple(c.items()) for c in f.combinations] for f in findings}


def together(parsed, fixed=None, values=None) -> tuple[list, dict[tuple, list[tuple]]]:
    findings = check(parsed, fixed, values, all_choices=True).findings
    return findings, together_index(findings)


def assert_same_both_ways(parsed, fixed=None, values=None) -> int:
    """The findings both ways, each in the same combinations; their count.

    One kind is weighed across combinations by design: a declaration that uses at two or
    more lines do not fit (``declaration-mismatch``) gathers its uses under every choice, so
    alone a combination may name fewer of them, or too few for the finding. It must hold in
    exactly the combinations of the findings that follow from it, and stand wherever one
    combination alone finds it."""
    alone = exhaustive(parsed, fixed, values)
    findings, at_once = together(parsed, fixed, values)
    gathered = [f for f in findings if f.kind == "declaration-mismatch"]
    for finding in gathered:
        following = [f for f in findings if f.caused_by is finding]
        assert following, finding.text()
        union = set()
        for other in following:
            union |= set(at_once[identity(other)])
        assert set(at_once[identity(finding)]) == union, finding.text()
        del at_once[identity(finding)]
    gathered_in = together_index(gathered)
    for key in [k for k in alone if k[0] == "declaration-mismatch"]:
        assert any(f.line == key[1] and set(alone[key]) <= set(gathered_in[identity(f)])
                   for f in gathered), key
        del alone[key]
    assert set(at_once) == set(alone), (sorted(set(at_once) - set(alone)),
                                        sorted(set(alone) - set(at_once)))
    space = checked_space(parsed, fixed, values)
    for finding in findings:
        if finding.kind == "declaration-mismatch":
            continue
        key = identity(finding)
        assert sorted(at_once[key]) == sorted(alone[key]), finding.text()
        if len(space) > 1:
            listed = [dict(c) for c in alone[key]]
            assert finding.choices == describe_combinations(listed, list(space), parsed), \
                finding.text()
    return len(findings)


# ---------------------------------------------------------------------------------------------
# Generated specs

HEAD = 'spec generated "random choice structure"\ndim B "batch"\ndim n "width"\n' \
       'dim m "another width"\n'


@st.composite
def specs(draw) -> str:
    """A spec of 1 to 4 choices of 2 or 3 options, 0 to 3 blocks and a model body, each a
    chain of statements: equations right or wrong ("B m" where "B n" is given), parameters
    of the wrong width, calls of earlier blocks with or without a declared shape, and `when`s
    (nested; `==`, `!=`, `in`, two conditions joined by `and`) whose branches define the same
    tensor."""
    choices = {f"c{i}": [f"o{j}" for j in range(draw(st.integers(2, 3)))]
               for i in range(draw(st.integers(1, 4)))}
    lines = [HEAD] + [f'choice {name} = {" | ".join(options)} "choice {name}"\n'
                      for name, options in choices.items()]
    blocks: list[str] = []
    counter = iter(range(10_000))

    def statement(output: str, source: str, indent: str, depth: int) -> list[str]:
        kind = draw(st.sampled_from(["right", "right", "wrong", "param", "call", "bare",
                                     "when", "when"] if depth < 2 else
                                    ["right", "wrong", "param", "call", "bare"]))
        if kind in ("call", "bare") and not blocks:
            kind = "right"
        if kind == "right":
            op = draw(st.sampled_from(["relu({s})", "{s} + {s}", "tanh({s})"]))
            return [f'{indent}{output} "B n" = {op.format(s=source)}\n']
        if kind == "wrong":
            return [f'{indent}{output} "B m" = relu({source})\n']
        if kind == "param":
            width = draw(st.sampled_from(["n", "m"]))
            param = f"P_{next(counter)}"
            return [f'{indent}param {param} "{width}" "a bias"\n',
                    f'{indent}{output} "B n" = {source} + {param}\n']
        if kind in ("call", "bare"):
            callee = draw(st.sampled_from(blocks))
            shape = ' "B n"' if kind == "call" else ""
            return [f"{indent}{output}{shape} = {callee}({source})\n"]
        conditions = []
        for name in draw(st.lists(st.sampled_from(sorted(choices)), min_size=1, max_size=2,
                                  unique=True)):
            options = choices[name]
            picked = draw(st.lists(st.sampled_from(options), min_size=1,
                                   max_size=len(options) - 1, unique=True))
            test = draw(st.sampled_from(["==", "!=", "in"]))
            chosen = " | ".join(picked) if test == "in" else picked[0]
            conditions.append(f"{name} {test} {chosen}")
        out = [f"{indent}when {' and '.join(conditions)}:\n"]
        out += statement(output, source, indent + "    ", depth + 1)
        out.append(f"{indent}else:\n")
        out += statement(output, source, indent + "    ", depth + 1)
        return out

    def body(first: str, last: str, indent: str) -> list[str]:
        length = draw(st.integers(1, 3))
        names = [f"T_{next(counter)}" for _ in range(length - 1)] + [last]
        out, source = [], first
        for name in names:
            out += statement(name, source, indent, 0)
            source = name
        return out

    for index in range(draw(st.integers(0, 3))):
        name = f"block_{index}"
        lines.append(f'block {name}(X "B n") -> Y:\n')
        lines += body("X", "Y", "    ")
        lines.append("\n")
        blocks.append(name)
    lines.append('input x "B n"\n')
    lines += body("x", "out", "")
    lines.append("output out\n")
    return "".join(lines)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(specs())
def test_generated_specs_give_the_same_findings_both_ways(text):
    try:
        parsed = tspec.parse(text, file="g.tspec")
        combinations(parsed)
    except tspec.SpecError:         # a spec the generator got wrong is no test
        return
    try:
        alone = exhaustive(parsed)
    except tspec.SpecError as error:
        # refused alone (a block whose local dims its inputs do not fix...): refused at once
        with pytest.raises(tspec.SpecError, match=re.escape(str(error).split(": ", 1)[1])):
            check(parsed, all_choices=True)
        return
    assert alone is not None
    assert_same_both_ways(parsed)


def _partial(text: str) -> bool:
    """Whether the spec has a finding in some of its combinations only, where some body
    calls a block without declaring the call's shape (the caller then sets its choices)."""
    try:
        findings = check(tspec.parse(text, file="g.tspec"), all_choices=True).findings
    except tspec.SpecError:
        return False
    return re.search(r"^\s*T_\d+ = block_", text, re.MULTILINE) is not None and \
        any(f.choices != "all choices" for f in findings)


def test_the_generator_plants_mistakes_under_some_choices_only():
    # the property above is no property if the generated specs were all clean, or wrong
    # alike under every choice
    found = find(specs(), _partial, settings=settings(database=None, max_examples=500,
                                                       suppress_health_check=list(HealthCheck)))
    findings = check(tspec.parse(found, file="g.tspec"), all_choices=True).findings
    assert any(f.choices != "all choices" for f in findings), found


# ---------------------------------------------------------------------------------------------
# The built-in spec's mutations and the shipped variants

OPENED = ("norm", "attention_bias", "normalization")


def _mutation_space(entry: dict, parsed) -> dict:
    """The choices held for a mutation: its own and the base's, but for those it opens and
    one of OPENED more (so that each mutation is proved under several combinations)."""
    choices = parsed.choice_values({**BASE, **entry["choices"]})
    opened = set(entry.get("open", []))
    opened.add(next(name for name in OPENED if name not in entry["choices"]))
    return {name: value for name, value in choices.items() if name not in opened}


@pytest.mark.parametrize("entry", CORPUS["mutation"] + CORPUS["elsewhere"],
                         ids=[f"{e['line']}:{e['new']}"
                              for e in CORPUS["mutation"] + CORPUS["elsewhere"]])
def test_each_mutation_gives_the_same_findings_both_ways(entry):
    text, _ = mutated(entry)
    parsed = tspec.parse(text, file="m.tspec")
    fixed = _mutation_space(entry, parsed)
    assert len(combinations(parsed, fixed)) >= 2
    assert assert_same_both_ways(parsed, fixed) >= 1


@pytest.mark.parametrize("name", sorted(shipped.builtin_variants()))
def test_each_shipped_variant_gives_the_same_findings_both_ways(name):
    # the variant's sizes under its own choices, and under the other norm and normalisation
    variant = tspec.api.load(name)
    chosen = variant.spec.choice_values(variant.choices)
    fixed = {k: v for k, v in chosen.items() if k not in ("norm", "normalization")}
    assert len(combinations(variant.spec, fixed)) == 4
    assert_same_both_ways(variant.spec, fixed, variant.given)


# ---------------------------------------------------------------------------------------------
# Proofs that scale with the choices that interact

LAYER_BLOCKS = ("scaled_dot_product_attention", "multi_head_attention", "cached_self_attention",
                "encoder_layer", "decoder_layer")


def test_fifteen_more_choices_in_the_blocks_are_proved_with_the_built_in_spec():
    # 15 more two-valued choices multiply the combinations by 32768 (3.6 billion); each
    # block is proved once per way of setting the choices it reads, so the check stays
    # within a few times today's (benchmarks/check_speed.py times it)
    text, added = with_more_choices(shipped.BUILTIN_SPEC.read_text())
    assert sum(added.values()) == 15
    assert sum(added.get(block, 0) for block in LAYER_BLOCKS) >= 8
    parsed = tspec.parse(text, file="more.tspec")
    today = math.prod(len(c.options) for c in
                      tspec.parse(shipped.BUILTIN_SPEC.read_text()).choices.values())
    result = check(parsed, all_choices=True)
    assert result.ok, [f.text() for f in result.findings]
    assert len(result.combinations) == today << 15


def test_a_mistake_under_one_added_choice_names_that_choice_alone():
    text, _ = with_more_choices(shipped.BUILTIN_SPEC.read_text())
    capped = 'S_h[H] "B T_q T_kv" "scores, plus the additive mask log M" = tanh('
    assert text.count(capped) == 1
    text = text.replace(capped, capped.replace('"B T_q T_kv"', '"B T_q T_q"'))
    parsed = tspec.parse(text, file="more.tspec")
    findings = check(parsed, all_choices=True).findings
    # scores of T_dec rows and T_dec columns where the keys have T: only in cross-attention,
    # so only in encoder-decoder models (their full forward; the step's follow from it)
    first = findings[0]
    assert (first.kind, first.tensor, first.caused_by) == \
        ("shape-mismatch", "decoder.layers[i].cross_attention.attention.S_h", None)
    assert first.message == "S_h is declared [H] B T_dec T_dec but its equation gives " \
        "[H] B T_dec T (axis 2)"
    assert first.choices == "extra_0=capped, arch=encoder_decoder, decoding=full"
    total = len(combinations(parsed))
    assert len(first.combinations) == total // 2 // 3 // 2
    assert [(f.choices, len(f.combinations)) for f in findings[1:]] == [
        ("extra_0=capped, arch=encoder_decoder, decoding=step", total // 2 // 3 // 2),
        ("extra_0=capped, arch=encoder_decoder|decoder_only, decoding=step",
         total // 2 // 3 * 2 // 2)]
    assert all(f.caused_by is first for f in findings[1:])
