"""One finding per kind, each pinned field by field; the checker collects them all."""

from fractions import Fraction

import pytest
import sympy
from support.oracle import describe_combinations
from support.specs import builtin_line

import tspec
from tspec import api
from tspec.checking.check import check, combinations
from tspec.checking.findings import KINDS, Finding, findings_data, findings_text, grouped, summary
from tspec.symbolic.shape import dim_symbol

HEADER = 'dim B "batch"\ndim T "length"\ndim d "width"\n'


def findings_of(text, choices=None, values=None, all_choices=False):
    parsed = tspec.parse(text, file="t.tspec")
    return check(parsed, choices, values, all_choices=all_choices).findings


def only(text, **kwargs) -> Finding:
    found = findings_of(text, **kwargs)
    assert len(found) == 1, [f.text() for f in found]
    return found[0]


def fields(finding: Finding) -> dict:
    return {name: getattr(finding, name) for name in
            ("kind", "message", "file", "line", "equation", "tensor", "expected", "inferred",
             "counterexample", "dims", "hint", "scope")}


def expect(finding: Finding, **wanted):
    """Every field pinned: the ones given, and the defaults of a proof finding for the rest."""
    defaults = {"file": "t.tspec", "equation": "", "tensor": "", "expected": None,
                "inferred": None, "counterexample": None, "dims": {}, "hint": "",
                "scope": "all sizes"}
    assert fields(finding) == {**defaults, **wanted}


def test_shape_mismatch():
    finding = only(HEADER + 'input X "B T d"\nparam W "d d"\nY "B d d" = X @ W\n')
    expect(finding, kind="shape-mismatch",
           message="Y is declared B d d but its equation gives B T d (axis 1)",
           line=6, equation="Y = X @ W", tensor="Y", expected="B d d", inferred="B T d",
           counterexample={"T": 2, "d": 1},
           hint='declare Y as "B T d", or fix the equation')


def test_shape_mismatch_quotes_the_claim_as_written_leading_unit_axes_included():
    # "1 T d" broadcasts like "T d", so it is compared so; but the report quotes the claim and
    # counts its axes as the spec writes them
    finding = only(HEADER + 'dim U "other length"\nP "1 T d" = sinusoidal_encoding(U, d)\n')
    expect(finding, kind="shape-mismatch",
           message="P is declared 1 T d but its equation gives U d (axis 1)", line=5,
           equation="P = sinusoidal_encoding(U, d)", tensor="P", expected="1 T d",
           inferred="U d", counterexample={"T": 2, "U": 1},
           hint='declare P as "U d", or fix the equation')
    finding = only(HEADER + 'input X "B T d"\nY "1 B T d d" = relu(X)\n')
    assert (finding.message, finding.expected) == (
        "Y is declared with rank 5 but its equation gives rank 3", "1 B T d d")


def test_shape_mismatch_of_rank():
    finding = only(HEADER + 'input X "B T d"\nY "B T" = relu(X)\n')
    expect(finding, kind="shape-mismatch",
           message="Y is declared with rank 2 but its equation gives rank 3",
           line=5, equation="Y = relu(X)", tensor="Y", expected="B T", inferred="B T d",
           hint='declare Y as "B T d", or fix the equation')


def test_dtype_mismatch():
    finding = only(HEADER + 'input m "B T" bool\nY "B T" int = log(m)\n')
    expect(finding, kind="dtype-mismatch", message="Y is declared int but its equation gives "
           "float", line=5, equation="Y = log(m)", tensor="Y",
           hint="declare Y as float, or change the equation")


def test_operand_mismatch():
    finding = only(HEADER + 'dim e "other"\ninput X "B T d"\nparam W "e d"\n'
                   'Y "B T d" = X @ W\n')
    expect(finding, kind="operand-mismatch",
           message="matmul inner dimensions of X (B T d) @ W (e d): d vs e", line=7,
           equation="Y = X @ W", tensor="Y", counterexample={"d": 2, "e": 1},
           hint="the last axis of the left operand must equal the second-to-last of the "
                "right: check the declared shapes of X (line 5) and W (line 6), or transpose "
                "one")


def test_operand_mismatch_inside_a_repeated_block_names_the_qualified_tensor():
    finding = only(HEADER + 'dim e "other"\ndim N "layers"\n'
                   'block stage(X "B T d") -> Y:\n'
                   '    param W "e d"\n'
                   '    Y "B T d" = X @ W\n'
                   'input Z "B T d"\n'
                   'O "B T d" = repeat(N, stage, Z) as layers\n')
    expect(finding, kind="operand-mismatch",
           message="matmul inner dimensions of X (B T d) @ W (e d): d vs e", line=8,
           equation="Y = X @ W", tensor="layers[i].Y", counterexample={"d": 2, "e": 1},
           hint="the last axis of the left operand must equal the second-to-last of the "
                "right: check the declared shapes of X (line 6) and W (line 7), or transpose "
                "one")


def test_argument_mismatch():
    finding = only(HEADER + 'dim e "other"\n'
                   'block f(X "B T d") -> Y:\n'
                   '    Y "B T d" = relu(X)\n'
                   'input Z "B T e"\n'
                   'O "B T d" = f(Z)\n')
    expect(finding, kind="argument-mismatch", message="Z (B T e) passed as f's input X "
           "(B T d)", line=8, equation="O = f(Z)", tensor="O", expected="B T d",
           inferred="B T e", counterexample={"d": 2, "e": 1},
           hint="pass a tensor of shape B T d, or check f's declaration of X (line 5)")


def test_repeat_mismatch():
    finding = only(HEADER + 'dim e "other"\ndim N "layers"\n'
                   'block f(X "B T d") -> Y:\n'
                   '    param W "d e"\n'
                   '    Y "B T e" = X @ W\n'
                   'input Z "B T d"\n'
                   'O "B T e" = repeat(N, f, Z)\n')
    expect(finding, kind="repeat-mismatch",
           message="repeat(N, f) feeds each copy's output Y (B T e) to the next copy's input "
                   "X (B T d)", line=10, equation="O = repeat(N, f, Z)", tensor="O",
           counterexample={"d": 2, "e": 1},
           hint="a repeated block must return the shape of its first input")


def test_repeat_mismatch_of_rank():
    finding = only(HEADER + 'dim N "layers"\n'
                   'block f(X "B T d") -> Y:\n'
                   '    Y "B T" = einsum("btd->bt", X)\n'
                   'input Z "B T d"\n'
                   'O "B T" = repeat(N, f, Z)\n')
    expect(finding, kind="repeat-mismatch", message="repeat(N, f) returns rank 2 but takes "
           "rank 3", line=8, equation="O = repeat(N, f, Z)", tensor="O",
           hint="a repeated block must return the shape of its first input")


def test_not_divisible():
    finding = only(HEADER + 'dim H "heads"\ninput X "B T d"\n'
                   'Y_h[H] "B T d/H" = split_heads(X, H)\n')
    expect(finding, kind="not-divisible",
           message="split_heads: heads must divide the last axis: H must divide d", line=6,
           equation="Y_h = split_heads(X, H)", tensor="Y_h", counterexample={"d": 1, "H": 2},
           hint="add the constraint `require d % H == 0`")


def test_sinusoidal_encoding_takes_any_width():
    # each column is its own sin or cos, so an odd width (ending with a sin column) is fine
    assert findings_of(HEADER + 'P "T d" = sinusoidal_encoding(T, d)\n'
                       'P_later "T d" = sinusoidal_encoding(T, d, T)\noutput P, P_later\n') == []


def test_not_divisible_rotary_width():
    # rotary turns feature i with feature i + d/2: without an even width there is no pairing
    finding = only(HEADER + 'input X "T d"\nY "T d" = rotary(X)\n')
    expect(finding, kind="not-divisible",
           message="rotary turns pairs of features, so the width must be even: 2 must divide d",
           line=5, equation="Y = rotary(X)", tensor="Y", counterexample={"d": 1},
           hint="add the constraint `require d % 2 == 0`")


def test_not_integral():
    finding = only('dim d "width"\ndim H "heads"\ndim d_k "head width"\nlet d_k = d / H\n')
    expect(finding, kind="not-integral",
           message="derived dim d_k = d / H is not a whole number for every size the "
                   "constraints allow", line=4, equation="let d_k = d / H",
           counterexample={"d": 1, "H": 2, "d_k": Fraction(1, 2)},
           hint="add the constraint `require d % H == 0`")
    assert finding.as_dict()["counterexample"] == {"d": 1, "H": 2, "d_k": "1/2"}


def test_out_of_range():
    finding = only(HEADER + 'dim L "table length"\nparam P "L d"\nY "T d" = P[:T]\n')
    expect(finding, kind="out-of-range", message="rows taken vs table length: T must not "
           "exceed L", line=6, equation="Y = P[:T]", tensor="Y",
           counterexample={"T": 2, "L": 1}, hint="add the constraint `require T <= L`")


def test_out_of_range_is_proved_away_by_a_constraint():
    assert findings_of(HEADER + 'dim L "table length"\nrequire T <= L\nparam P "L d"\n'
                       'Y "T d" = P[:T]\nparam R "2*L-1"\n'
                       'S "T T" = relative_position_bias(R, T, T)\n') == []


# a decoding step: T new positions after T_past decoded ones, within a table of max_len
STEP = ('dim B "batch"\ndim T_past "positions decoded"\ndim T "new positions"\n'
        'dim d "width"\ndim max_len "positions the table covers"\n'
        'require T_past + T <= max_len\nrequire d % 2 == 0\n'
        'input X "B T d"\nparam P_table "max_len d"\nparam R "2*max_len-1"\n')


def test_a_decoding_step_with_offsets_and_row_ranges_proves_clean():
    assert findings_of(STEP + 'P "T d" = P_table[T_past:T_past + T]\n'
                       'Q "B T d" = rotary(X + P, T_past)\n'
                       'S "T d" = sinusoidal_encoding(T, d, T_past)\n'
                       'M "T T_past+T" bool = causal_mask(T, T_past + T)\n'
                       'L "T T_past+T" = relative_position_bias(R, T, T_past + T)\n'
                       'F "T d" = P_table[:T]\n'
                       'output Q, S, M, L, F\n') == []
    # the same with block-local dims, bound at the call: queries the last of the keys
    assert findings_of('dim B "b"\ndim T "t"\ndim U "u"\nrequire T <= U\n'
                       'block attend(X "B T_q", Y "B T_kv") -> M:\n'
                       '    dim T_q "q"\n    dim T_kv "k"\n'
                       '    M "T_q T_kv" bool = causal_mask(T_q, T_kv)\n'
                       'input X "B T"\ninput Y "B U"\nZ "T U" bool = attend(X, Y)\n'
                       'output Z\n') == []


def test_out_of_range_slice_past_the_table():
    finding = only(STEP + 'Y "max_len+1 d" = P_table[:max_len+1]\n')
    expect(finding, kind="out-of-range", message="rows taken vs table length: max_len+1 must "
           "not exceed max_len", line=11, equation="Y = P_table[:max_len + 1]", tensor="Y",
           # was `require max_len+1 <= max_len`, which no size meets
           hint="declare P_table (line 9) with a row for every position it serves: its "
                "max_len rows do not cover max_len+1")


def test_out_of_range_slice_of_no_rows():
    finding = only(STEP + 'Y "0 d" = P_table[T_past:T_past]\n')
    expect(finding, kind="out-of-range", message="slice start vs stop (a row at least): "
           "T_past+1 must not exceed T_past", line=11, equation="Y = P_table[T_past:T_past]",
           # was `require T_past+1 <= T_past`, which no size meets
           tensor="Y", hint="the slice's stop T_past must be past its start T_past for every "
           "size the spec allows: check both")


def test_out_of_range_slice_from_before_the_first_row():
    finding = only(STEP + 'Y "3 d" = P_table[T - 3:T]\n')
    expect(finding, kind="out-of-range", message="slice start (rows skipped): 0 must not "
           "exceed T-3", line=11, equation="Y = P_table[T - 3:T]", tensor="Y",
           counterexample={"T_past": 1, "T": 1, "max_len": 2},
           # was `require 0 <= T-3`: a bound on the input's length T alone hides the mistake
           hint="the slice's start T-3 must be at least 0 for every size the spec allows: "
                "check it")


def test_out_of_range_slice_stop_past_the_table():
    finding = only(STEP + 'Y "T d" = P_table[T_past + 1:T_past + T + 1]\n')
    expect(finding, kind="out-of-range", message="slice stop vs table length: T+T_past+1 must "
           "not exceed max_len", line=11, equation="Y = P_table[T_past + 1:T_past + T + 1]",
           tensor="Y", counterexample={"T_past": 1, "T": 1, "max_len": 2},
           hint="add the constraint `require T + T_past + 1 <= max_len`")


def test_out_of_range_causal_mask_with_more_queries_than_keys():
    finding = only(HEADER + 'dim T_q "q"\ndim T_kv "k"\n'
                   'M "T_kv T_q" bool = causal_mask(T_kv, T_q)\n')
    expect(finding, kind="out-of-range", message="causal mask: queries (the last positions of "
           "the keys) vs keys: T_kv must not exceed T_q", line=6,
           equation="M = causal_mask(T_kv, T_q)", tensor="M",
           counterexample={"T_q": 1, "T_kv": 2}, hint="add the constraint `require T_kv <= T_q`")


def test_out_of_range_relative_position_bias_with_more_queries_than_keys():
    finding = only(HEADER + 'dim T_q "q"\ndim T_kv "k"\nrequire T_q <= T_kv\n'
                   'param R "2*T_q-1"\nL "T_kv T_q" = relative_position_bias(R, T_kv, T_q)\n')
    expect(finding, kind="out-of-range", message="relative position bias: queries (the last "
           "positions of the keys) vs keys: T_kv must not exceed T_q", line=8,
           equation="L = relative_position_bias(R, T_kv, T_q)", tensor="L",
           counterexample={"T_q": 1, "T_kv": 2}, hint="add the constraint `require T_kv <= T_q`")


def test_out_of_range_relative_position_bias_offsets_need_the_keys_length():
    # queries the last of the keys: offsets from -(T_kv - 1) to T_q - 1, so 2*T_kv - 1 entries
    finding = only(HEADER + 'dim T_q "q"\ndim T_kv "k"\nrequire T_q <= T_kv\n'
                   'param R "2*T_q-1"\nL "T_q T_kv" = relative_position_bias(R, T_q, T_kv)\n')
    expect(finding, kind="out-of-range", message="relative offsets needed vs table length: "
           "2*T_kv-1 must not exceed 2*T_q-1", line=8,
           equation="L = relative_position_bias(R, T_q, T_kv)", tensor="L",
           counterexample={"T_q": 1, "T_kv": 2},
           hint="add the constraint `require T_kv <= T_q`")


def test_unproved():
    # T <= 13 fails first at T = 14, past the sizes the search tries: no proof, and no
    # counterexample (T <= T**2, once the example here, is proved: T = 1 + t gives t + t**2)
    finding = only('dim T "length"\ndim d "width"\nparam P "13 d"\nY "T d" = P[:T]\n')
    expect(finding, kind="unproved",
           message="rows taken vs table length: T must not exceed 13 (not proved, and no "
                   "counterexample with every dim up to 12)", line=4, equation="Y = P[:T]",
           tensor="Y", hint="add the constraint `require T <= 13`")


def test_unstated_shape():
    finding = only(HEADER + 'dim e "other"\ninput X "B T d"\nparam W ?\nY "B T e" = X @ W\n')
    expect(finding, kind="unstated-shape",
           message="parameter W has no stated shape; its uses require (d, e)", line=6,
           tensor="W", inferred="d e", hint='declare it: param W "d e"')


def test_unstated_shape_of_a_bias_reports_the_smallest_broadcastable_shape():
    finding = only(HEADER + 'input X "B T d"\nparam b ?\nY "B T d" = X + b\n')
    expect(finding, kind="unstated-shape",
           message="parameter b has no stated shape; its uses require (d); any shape that "
                   "broadcasts to (B, T, d) fits, and this is the smallest", line=5,
           tensor="b", inferred="d", hint='declare it: param b "d"')


def test_unstated_shape_with_a_width_the_spec_never_names():
    finding = only(HEADER + 'param E ?\ninput t "B T" int\nX "B T d" = E[t]\n')
    expect(finding, kind="unstated-shape",
           message="parameter E has no stated shape; its uses require (k1, d); k1 is a width "
                   "the spec never names", line=4, tensor="E", inferred="k1 d",
           hint='declare it: param E "k1 d", after declaring dim k1')


def test_unstated_shape_that_its_source_implies():
    # a positional encoding added per position: the source implies (T, d); the smallest
    # shape its use accepts, (d), is a remark
    finding = only(HEADER + 'input X "B T d"\ninput P ? implied "T d" "positions"\n'
                   'Y "B T d" = X + P\n')
    expect(finding, kind="unstated-shape",
           message="input P has no stated shape; its source implies (T, d); its uses require "
                   "(d); any shape that broadcasts to (B, T, d) fits, and this is the smallest",
           line=5, tensor="P", inferred="T d", hint='declare it: input P "T d"')
    # a width the uses leave free is named by what the source implies
    finding = only(HEADER + 'dim V "vocabulary"\nparam E ? implied "V d"\ninput t "B T" int\n'
                   'X "B T d" = E[t]\n')
    assert (finding.message, finding.inferred, finding.hint) == (
        ("parameter E has no stated shape; its source implies (V, d); its uses require (k1, d); "
        "k1 is a width the spec never names"), "V d", 'declare it: param E "V d"')


@pytest.mark.parametrize("implied, needs", [
    ("d T", "d, or a shape that broadcasts to B T d"),     # the wrong axis last
    ("B B T d", "d, or a shape that broadcasts to B T d"),  # more axes than the sum has
    ("2 d", "d, or a shape that broadcasts to B T d"),      # neither T nor 1 in front
])
def test_an_implied_shape_its_uses_do_not_accept_is_a_finding(implied, needs):
    found = findings_of(HEADER + f'input X "B T d"\ninput P ? implied "{implied}"\n'
                        'Y "B T d" = X + P\n')
    assert [(f.kind, f.line, f.message, f.expected) for f in found] == [
        ("shape-mismatch", 5, (f"P: the shape its source implies, {implied}, does not fit its "
         f"uses: they require {needs}"), implied),
        ("unstated-shape", 5, ("input P has no stated shape; its uses require (d); any shape "
         "that broadcasts to (B, T, d) fits, and this is the smallest"), None)]
    # a matmul operand broadcasts nothing: the implied shape is the one its use requires
    found = findings_of(HEADER + 'input X "B T d"\nparam W ? implied "d T"\nY "B T d" = X @ W\n')
    assert next((f.kind, f.message) for f in found) == (
        "shape-mismatch", ("W: the shape its source implies, d T, does not fit its uses: they "
        "require d d"))


def test_name_reused():
    finding = only(HEADER + 'dim V "vocabulary size"\ninput X "B T d"\nY "B T d" = X\n'
                   'source "a note, section 2"\n'
                   'reused V as V, Y "V is the vocabulary size and the values"\n')
    expect(finding, kind="name-reused", line=8,
           message="the source uses the name V for different things: V is the vocabulary size "
                   "and the values", hint="give each its own name (this spec names them V, Y)")
    finding = only(HEADER + 'input Q "T d"\nreused Q as Q "the queries and the input"\n')
    assert finding.hint == ("give each its own name (this spec keeps the one name Q, so that "
                            "the checker judges how its uses clash)")


def test_constraint_violated():
    finding = only('dim d "width"\ndim H "heads"\nrequire d % H == 0\n',
                   values={"d": 10, "H": 4})
    expect(finding, kind="constraint-violated", message="d=10 is not divisible by H=4",
           line=3, equation="require d % H == 0", dims={"d": 10, "H": 4},
           hint="valid H near 4: 2, 5; valid d near 10: 8, 12", scope="variant")


def test_constraint_violated_inequality():
    finding = only('dim T "length"\ndim L "table"\nrequire T <= L\n', values={"T": 10, "L": 4})
    expect(finding, kind="constraint-violated", message="T <= L does not hold for L=4, T=10",
           line=3, equation="require T <= L", dims={"T": 10, "L": 4},
           hint="valid L near 4: 10; valid T near 10: 4", scope="variant")


def test_constraint_violated_by_a_number_shows_the_number_alone():
    finding = only('dim d "width"\nrequire d % 2 == 0\n', values={"d": 7})
    expect(finding, kind="constraint-violated", message="d=7 is not divisible by 2",
           line=2, equation="require d % 2 == 0", dims={"d": 7},
           hint="valid d near 7: 6, 8", scope="variant")


def test_constraint_violated_with_no_valid_value_nearby_says_so():
    finding = only('dim T "length"\ndim L "table"\nrequire T + 100 <= L\n',
                   values={"T": 10, "L": 4})
    assert finding.hint == ("valid L near 4: 110; no valid T within 4095 of 10 with the "
                            "other dims held")


CHOSEN = ('choice heads = all | grouped "key-value heads"\n'
          'dim B "batch"\ndim T "length"\ndim d "width"\ndim H "heads"\ndim G "groups"\n'
          'input X "B T d"\nwhen heads == grouped:\n    param W "d G" "keys"\nelse:\n'
          '    param W "d H" "keys"\nY "B T d" = relu(X @ W @ W.T)\noutput Y\n')


def variant_of(tmp_path, toml: str, spec: str = CHOSEN):
    (tmp_path / "t.tspec").write_text('spec t "t"\n' + spec)
    (tmp_path / "v.toml").write_text('spec = "t.tspec"\n' + toml)
    return api.load(str(tmp_path / "v.toml"))


def test_unused_dim(tmp_path):
    # G is used under heads = grouped alone: set under heads = all, the model built has H
    # keys, whatever G says
    variant = variant_of(tmp_path, "[dims]\nd = 8\nH = 4\nG = 2\n")
    finding, = api.check(variant).findings
    expect(finding, kind="unused-dim", file=str(tmp_path / "v.toml"), line=5,
           message="G is set but unused: it is used under heads = grouped", equation="G = 2",
           dims={"G": 2}, hint="set heads = grouped to use it, or remove G", scope="variant")
    finding, = api.check(variant.with_settings(["B=3"]).with_settings(["G=5"])).findings
    assert (finding.line, finding.equation, finding.dims) == (None, "--set G=5", {"G": 5})
    # under grouped, G is used and H (set in the file) is not
    assert [f.message for f in api.check(variant.with_settings(["heads=grouped"])).findings] \
        == ["H is set but unused: it is used under heads = all"]
    # a dim set before others is shown with its own value (it showed the last dim's: G = 8)
    finding, = api.check(variant_of(tmp_path, "[dims]\nG = 2\nd = 8\nH = 4\n")).findings
    assert (finding.line, finding.equation) == (3, "G = 2")


def test_unused_dim_that_nothing_uses(tmp_path):
    variant = variant_of(tmp_path, "[dims]\nd = 8\nH = 4\nE = 2\n", CHOSEN + 'dim E "spare"\n')
    finding, = api.check(variant).findings
    assert (finding.message, finding.hint) == (
        ("E is set but unused: no equation, shape or constraint of the spec uses it under any "
        "choices"), "remove E")


def test_unused_dim_in_a_bare_spec_only_where_no_open_choice_uses_it(tmp_path):
    variant = variant_of(tmp_path, "").spec
    assert api.check(variant, ["G=2"]).findings == []         # heads is open: grouped uses G
    finding, = api.check(variant, ["G=2", "heads=all"]).findings
    assert finding.message == "G is set but unused: it is used under heads = grouped"


def test_unused_choice(tmp_path):
    # heads consulted under kind = attention alone: set otherwise, grouped built nothing
    spec = ('choice kind = attention | mlp "the block"\n' + CHOSEN.replace(
        "when heads == grouped:", "when kind == attention and heads == grouped:"))
    variant = variant_of(tmp_path, '[dims]\nd = 8\nH = 4\n[choices]\nkind = "mlp"\n'
                                   'heads = "grouped"\n', spec)
    found = [f for f in api.check(variant).findings if f.kind == "unused-choice"]
    expect(found[0], kind="unused-choice", file=str(tmp_path / "v.toml"), line=7,
           message="heads = grouped is set but unused: it is consulted under kind = attention",
           equation='heads = "grouped"', scope="variant",
           hint="set kind = attention for it to count, or remove heads")
    # the default option set, or a choice in force, is no finding
    assert not [f for f in api.check(variant.with_settings(["heads=all"])).findings
                if f.kind == "unused-choice"]


def test_unused_setting():
    # theta turns rotary positions, which GPT-2 has not: its run and module took it silently
    finding, = api.check("gpt2_small", ["theta=500000"]).findings
    expect(finding, kind="unused-setting", file=str(api.builtin_variants()["gpt2_small"]),
           message="theta is set but unused: the ops that read it are applied under "
                   "positional = rotary", equation="--set theta=500000", scope="variant",
           hint="set positional = rotary for it to count, or remove theta", line=None)
    assert api.check("llama3_8b", ["theta=500000"]).findings == []


def test_missing_dim(tmp_path):
    # grouped uses G, which has no value and none that tspec run gives (B, T do)
    variant = variant_of(tmp_path, '[dims]\nH = 4\nd = 8\n[choices]\nheads = "grouped"\n')
    report = api.check(variant)
    expect(report.findings[1], kind="missing-dim", file=str(tmp_path / "v.toml"), line=6,
           message="G has no value, and the model uses it (under heads = grouped)",
           equation='heads = "grouped"', scope="variant",
           hint="give it a value: G = VALUE in the variant's [dims], or --set G=VALUE "
                "(tspec run sizes B and T itself, no other dim)")
    # H is set for nothing under grouped: both said, the value given first
    assert next((f.kind, f.message) for f in report.findings) == (
        "unused-dim", "H is set but unused: it is used under heads = all")
    assert len(report.findings) == 2


@pytest.mark.parametrize("name", sorted(api.builtin_variants()))
def test_every_shipped_variant_says_which_choice_uses_each_dim_it_leaves_unused(name):
    from tspec.language.uses import dim_uses, holds
    variant = api.load(name)
    spec = variant.spec
    chosen = spec.choice_values(variant.choices)
    assert api.check(variant).findings == []
    uses = dim_uses(spec)
    left = [dim for dim in spec.dims if dim not in variant.dims and not any(
        holds(c, chosen) for c in uses[dim])]
    assert left, name          # every shipped variant leaves some dim unused (T_past at least)
    for dim in left:
        finding, = [f for f in api.check(variant, [f"{dim}=3"]).findings
                    if f.kind == "unused-dim"]
        # the condition named is one the spec uses the dim under, with the variant's
        # choices changed as it says; and under it, the dim is used
        under = finding.message.removeprefix(f"{dim} is set but unused: it is used under ")
        asked = [(part.split(" = ")[0], part.split(" = ")[1].split(" or "))
                 for part in under.split(" and ")]
        # each option it names, the others as they are (the first of each other choice it
        # names), uses the dim; and no fewer choices would
        for choice, options in asked:
            for option in options:
                changed = chosen | {c: o[0] for c, o in asked} | {choice: option}
                assert any(holds(c, changed) for c in uses[dim]), (dim, under, option)
        fewer = [len([1 for c, o in cond if chosen[c] not in o]) for cond in uses[dim]]
        assert len(asked) == min(fewer), (dim, under)
        assert finding.equation == f"--set {dim}=3"


def test_unused_dims_of_the_built_in_variants_named_as_a_user_reads_them():
    said = {dim: f.message for dim in ("H_kv", "W", "T_past", "V_type", "max_len")
            for f in api.check("base", [f"{dim}=4"]).findings}
    assert said == {
        "H_kv": "H_kv is set but unused: it is used under key_value_heads = grouped",
        "W": "W is set but unused: it is used under attention_window = sliding",
        "T_past": "T_past is set but unused: it is used under decoding = step",
        "V_type": "V_type is set but unused: it is used under arch = encoder_only and "
                  "encoder_io = bert or bert_unpooled",
        "max_len": "max_len is set but unused: it is used under positional = learned or "
                   "relative"}


def test_shape_mismatch_hint_declares_a_family():
    finding = only(HEADER + 'dim H "heads"\ninput X[H] "B T d"\nY[H] "B d" = relu(X)\n')
    assert finding.hint == 'declare Y[H] as "B T d", or fix the equation'


def test_declared_size_that_is_a_non_positive_number():
    finding = only(HEADER + 'input X "B d-d+1-1"\n')
    assert (finding.kind, finding.hint) == (
        "out-of-range", "fix the declared shape: a size is at least 1")


def test_unsatisfiable():
    finding = only(HEADER + 'require T < d\nrequire d < T\ninput X "B T d"\n'
                   'Y "B T d" = relu(X)\n')
    expect(finding, kind="unsatisfiable",
           message="no sizes satisfy every constraint: `require T < d` (line 4); "
                   "`require d < T` (line 5)", line=4, equation="require T < d",
           hint="remove or relax a constraint: a spec no size satisfies proves nothing")


def test_unsatisfiable_names_the_derived_dims_that_take_part():
    # was: the constraints alone named, though `require T <= d` is met by T = d = 1; it is
    # k = T - d >= 1 that no size meets beside it
    finding = only(HEADER + 'dim k "difference"\nlet k = T - d\nrequire T <= d\n')
    expect(finding, kind="unsatisfiable",
           message="no sizes satisfy every constraint and derived dim (each a whole number "
                   ">= 1): `require T <= d` (line 6); `let k = T - d` (line 5)",
           line=6, equation="require T <= d",
           hint="remove or relax a constraint, or redefine a derived dim: a spec no size "
                "satisfies proves nothing")


def test_constraints_unproved_beside_a_derived_dim_name_it():
    finding = only('dim H "heads"\ndim d "width"\ndim d_k "head width"\nlet d_k = d / H\n'
                   'require H > d\n')
    expect(finding, kind="unproved",
           message="no sizes found that satisfy every constraint and derived dim (each a whole "
                   "number >= 1) (`require H > d` (line 5); `let d_k = d / H` (line 4)), and "
                   "none proved to exist", line=5, equation="require H > d",
           hint="remove or relax a constraint, or redefine a derived dim: a spec no size "
                "satisfies proves nothing")


@pytest.mark.parametrize("constraints", ["require T == 0", "require T == d - d",
                                         "require T == d\nrequire d == 0",
                                         "require d_k == 1\nlet d_k = T - d\nrequire T <= d"])
def test_an_equality_that_fixes_a_dim_below_1_is_unsatisfiable(constraints):
    # was 'unproved': the prover used T == 0 as the substitution T -> 0 and lost T >= 1
    header = HEADER + ('dim d_k "derived"\n' if "d_k" in constraints else "")
    finding = only(header + constraints + "\n")
    first = constraints.split("\n")[0]
    assert (finding.kind, finding.line, finding.equation) == (
        "unsatisfiable", header.count("\n") + 1, first)


@pytest.mark.parametrize("text, values", [
    ('dim d_k "k"\nlet d_k = d / (T - B)\nrequire T == B\n', None),
    ('dim d_k "k"\nlet d_k = d / (B - 8)\nrequire d <= 512\n', {"B": 8}),
])
def test_a_derived_dim_that_divides_by_zero_leaves_the_constraints_unproved(text, values):
    # was a traceback: the feasibility program got d_k = zoo * d >= 1, which linprog refuses
    finding = only(HEADER + text, values=values)
    assert (finding.kind, finding.line) == ("unproved", 6)


def test_constraints_neither_met_nor_refuted_are_unproved():
    finding = only('dim n "size"\nrequire n * n == 2\n')
    expect(finding, kind="unproved",
           message="no sizes found that satisfy every constraint (`require n * n == 2` "
                   "(line 2)), and none proved to exist", line=2, equation="require n * n == 2",
           hint="remove or relax a constraint: a spec no size satisfies proves nothing")


def test_constraints_met_only_by_large_sizes_are_satisfiable():
    assert findings_of(HEADER + 'require T >= 100\nrequire d % T == 0\ninput X "B T d"\n'
                       'Y "B T d" = relu(X)\n') == []


def test_derived_dim_that_can_be_zero_is_out_of_range():
    finding = only('dim n "size"\ndim m "size"\ndim k "difference"\nlet k = n - m\n')
    expect(finding, kind="out-of-range",
           message="derived dim k = n - m is not at least 1 for every size the constraints "
                   "allow", line=4, equation="let k = n - m",
           counterexample={"n": 1, "m": 1, "k": 0}, hint="add the constraint `require n - m >= 1`")


def test_derived_dim_proved_positive_by_a_constraint():
    assert findings_of('dim n "size"\ndim m "size"\ndim k "difference"\nlet k = n - m\n'
                       'require m < n\n') == []


def test_negative_derived_dim_under_values_is_shown_as_a_whole_number():
    found = findings_of('dim n "size"\ndim m "size"\ndim k "difference"\nlet k = n - m\n'
                        'require m < n\n', values={"n": 2, "m": 6})
    assert [f.message for f in found] == ["m < n does not hold for m=6, n=2"]
    found = findings_of('dim n "size"\ndim m "size"\ndim k "difference"\nlet k = n - m\n',
                        values={"n": 2, "m": 6})
    assert [f.message for f in found] == [
        "derived dim k = n - m is -4, not a positive whole number for m=6, n=2"]


def test_broadcast_counterexample_has_both_sizes_above_one():
    # B=2, H=1 broadcasts fine, so it is no counterexample
    finding = only('dim B "batch"\ndim H "heads"\ninput x "B"\ninput z "H"\ny "B" = x + z\n')
    assert finding.kind == "operand-mismatch"
    assert finding.counterexample == {"B": 3, "H": 2}


def test_decoding_mismatch():
    # a state (a key cache) kept in a spec with no decoding step: generated code refuses it
    finding = only(HEADER + 'block f(X "B T d") -> Y:\n'
                   '    state K "B T d" "keys so far" from X\n'
                   '    Y "B T d" = relu(X)\n'
                   'input X "B T d"\nY "B T d" = f(X) as f1\n')
    expect(finding, kind="decoding-mismatch",
           message="state K is kept where the model runs whole: a full forward keeps no "
                   "states, only a decoding step (under `decoding == step`, a choice "
                   "`decoding = full | step`)",
           line=5, equation="state K from X", tensor="f1.K",
           hint="declare states in the blocks the decoding step calls, under "
                "`when decoding == step`")


def test_declaration_mismatch():
    # a parameter that none of its uses (two lines) fits: its declaration is the mistake, and
    # each use's finding follows from it
    found = findings_of(HEADER + 'dim e "other"\nchoice act = relu | gelu\n'
                        'input X "B T d"\nparam W "e d"\nY_0 "B T d" = X + X\n'
                        'when act == relu:\n    Y "B T d" = relu(X @ W)\n'
                        'else:\n    Y "B T d" = gelu(X @ W)\n', all_choices=True)
    cause, *consequences = found
    expect(cause, kind="declaration-mismatch",
           message="W is declared e d, which none of its uses fits (lines 10, 12)", line=7,
           equation='param W "e d"',
           hint="declare W with the shape its uses need, or fix them; the first, at line 10: "
                "matmul inner dimensions of X (B T d) @ W (e d): d vs e")
    assert cause.choices == "all choices"
    assert [(f.kind, f.line, f.caused_by) for f in consequences] == [
        ("operand-mismatch", 10, cause), ("operand-mismatch", 12, cause)]
    # X fits X + X at line 8; without that use, X or W may be the mistake
    found = findings_of(HEADER + 'dim e "other"\nchoice act = relu | gelu\n'
                        'input X "B T d"\nparam W "e d"\n'
                        'when act == relu:\n    Y "B T d" = relu(X @ W)\n'
                        'else:\n    Y "B T d" = gelu(X @ W)\n', all_choices=True)
    assert [(f.kind, f.line) for f in found] == [("operand-mismatch", 9),
                                                  ("operand-mismatch", 11)]


def test_a_declaration_with_one_use_that_does_not_fit_is_the_uses_finding():
    # seed 003 multiplies the queries Q (n d_k) by W_Q_h (d_model d_k), its only use: the
    # equation may as well be the mistake, so the finding stays with it
    found = findings_of(HEADER + 'dim e "other"\ninput X "B T d"\nparam W "e d"\n'
                        'Y "B T d" = relu(X @ W)\n')
    assert [(f.kind, f.line) for f in found] == [("operand-mismatch", 7)]


def test_a_declaration_that_some_use_fits_is_not_blamed():
    # W fits X @ W at line 7; Z fits neither of its uses
    found = findings_of(HEADER + 'input X "B T d"\ninput Z "B T T"\nparam W "d d"\n'
                        'Y "B T d" = X @ W\nV "B T d" = Z @ W\nU "B T d" = relu(Z @ W)\n')
    assert [(f.kind, f.line) for f in found] == [("declaration-mismatch", 5),
                                                  ("operand-mismatch", 8),
                                                  ("operand-mismatch", 9)]
    assert found[0].message == "Z is declared B T T, which none of its uses fits (lines 8, 9)"


def test_absent_operand():
    # b is absent under bias=none: as a term of + it drops (Y), read by relu it cannot (U)
    found = findings_of(HEADER + 'choice bias = all | none\ninput X "B T d"\n'
                        'param b "d" "bias" if bias == all\nY "B T d" = X + b\n'
                        'U "B T d" = relu(b) + Y\n', all_choices=True)
    assert len(found) == 1, [f.text() for f in found]
    expect(found[0], kind="absent-operand",
           message="b is absent under bias=none; only a term of + or - may be absent", line=8,
           equation="U = relu(b) + Y", tensor="U",
           hint="declare b without 'if', or add it as a term")
    assert found[0].choices == "bias=none"


def test_absent_operand_leaving_no_term():
    finding = only(HEADER + 'choice bias = all | none\nparam b "d" if bias == all\n'
                   'param c "d" if bias == all\nY "d" = b + c\n', all_choices=True)
    expect(finding, kind="absent-operand",
           message="Y has no term left under bias=none: b and c are absent", line=7,
           equation="Y = b + c", tensor="Y", hint="keep a term that is always present")


def test_not_an_op():
    # the choice's option swiglu names no activation op: the equation cannot stand under it
    finding = only(HEADER + 'choice act = relu | gelu | swiglu\ninput X "B T d"\n'
                   'Y "B T d" = act(X)\n', all_choices=True)
    expect(finding, kind="not-an-op",
           message="act=swiglu names no activation op; put this equation under "
                   "`when act != swiglu`", line=6, equation="Y = act(X)", tensor="Y")
    assert finding.choices == "act=swiglu"
    # an op that is not an activation is no more one
    finding = only(HEADER + 'choice act = relu | softmax\ninput X "B T d"\n'
                   'Y "B T d" = act(X)\n', all_choices=True)
    assert finding.message == "act=softmax names no activation op; put this equation under " \
        "`when act != softmax`"


ATTEND = ('block f(X_q "B T_q d", X_kv "B T_kv d") -> O:\n    dim T_q "q"\n    dim T_kv "k"\n'
          '    param W "d d" "w"\n    when c == x:\n        K "B T_kv d" = X_kv @ W\n'
          '        O "B T_q d" = X_q @ K.T @ K\n    else:\n        O "B T_q d" = X_q @ W\n')


def test_unknown_override():
    # g's K would replace f's, but f computes K only under c=x
    found = findings_of(HEADER + 'choice c = x | y\n' + ATTEND +
                        'block g(X "B T_x d") -> O:\n    dim T_x "x"\n'
                        '    from f with X_q = X, X_kv = X, T_q = T_x, T_kv = T_x\n'
                        '    K "B T_x d" = relu(X)\n'
                        'input X "B T d"\nY "B T d" = g(X) as g1\n', all_choices=True)
    assert len(found) == 1, [f.text() for f in found]
    expect(found[0], kind="unknown-override",
           message="K overrides nothing here: f computes K only under c=x", line=17,
           equation="K = relu(X)", tensor="g1.K",
           hint="put this equation under the choices f computes K under, or give it a name of "
                "its own")
    assert found[0].choices == "c=y"


def test_unknown_binding():
    finding = only(HEADER + 'choice c = x | y\n' + ATTEND +
                   'block g(X "B T d") -> O:\n'
                   '    from f with X_q = X, X_kv = X, T_q = T, T_kv = T, Y_q = X\n'
                   'input X "B T d"\nY "B T d" = g(X) as g1\n', all_choices=True)
    expect(finding, kind="unknown-binding",
           message="f has no input or local dim Y_q to bind; it has X_q, X_kv, T_q, T_kv",
           line=15, hint="bind one of those; did you mean 'X_q'?")


def test_every_kind_has_a_test():
    # one test per kind, named after it: test_shape_mismatch, test_not_integral, ...
    missing = [kind for kind in KINDS if f"test_{kind.replace('-', '_')}" not in globals()]
    assert missing == []


# ---------------------------------------------------------------------------------------------
# Collection, merging across choices, display

def test_all_findings_are_collected():
    found = findings_of(HEADER + 'dim e "other"\ndim L "table"\n'
                        'input X "B T d"\nparam W "e d"\nparam P "L d"\n'
                        'Y "B T d" = X @ W\n'          # operand-mismatch
                        'Z "B d d" = relu(X)\n'        # shape-mismatch
                        'Q "T d" = P[:T]\n')           # out-of-range
    assert [(f.kind, f.line, f.tensor) for f in found] == [
        ("operand-mismatch", 9, "Y"), ("shape-mismatch", 10, "Z"), ("out-of-range", 11, "Q")]


def test_a_refuted_claim_is_reported_once_not_again_downstream():
    # Y's claim is wrong but its equation is sound: later equations go on from what Y is
    found = findings_of(HEADER + 'input X "B T d"\nY "B d d" = relu(X)\n'
                        'Z "B T d" = relu(Y)\n')
    assert [(f.kind, f.tensor) for f in found] == [("shape-mismatch", "Y")]


# ---------------------------------------------------------------------------------------------
# One mistake, one finding first: consequences beneath their cause

def test_a_finding_that_only_follows_from_an_earlier_ones_tensor_is_its_consequence():
    # P's equation takes T_dec rows where its claim (and Z's equation) has T: Z's operand
    # mismatch is no second mistake, it follows from P's
    found = findings_of(HEADER + 'dim T_dec "t"\ndim L "rows"\nrequire T <= L\n'
                        'require T_dec <= L\nparam P_table "L d"\ninput X "B T d"\n'
                        'P "T d" = P_table[:T_dec]\nZ "B T d" = X + P\nO "B T d" = relu(Z)\n')
    cause, consequence = found
    assert (cause.kind, cause.line, consequence.kind, consequence.line) == (
        "shape-mismatch", 10, "operand-mismatch", 11)
    assert consequence.caused_by is cause and cause.caused_by is None
    # Z's equation uses P as declared: the equation is what to fix, not the declaration; the
    # redeclaration is not offered, as (checked) it moves the mismatch to line 11 (was:
    # 'declare P as "T_dec d", or fix the equation; line 11 uses P as declared')
    assert cause.hint == ('fix the equation (declaring P as "T_dec d" would move the mismatch '
                          'to line 11)')
    assert findings_text(found) == [cause.text() + (
        "\n    and 1 consequence, which follows from it:\n"
        "        t.tspec:11: operand-mismatch: add operands X (B T d) and P (T_dec d), axis -2: "
        "T vs T_dec")]
    assert summary(found) == "1 finding and 1 consequence"
    assert [d["caused_by"] for d in findings_data(found)] == [None, 0]


def test_a_finding_with_a_reason_of_its_own_is_no_consequence():
    found = findings_of(HEADER + 'dim T_dec "t"\ndim L "rows"\nrequire T <= L\n'
                        'require T_dec <= L\nparam P_table "L d"\ninput X "B T d"\n'
                        'P "T d" = P_table[:T_dec]\nZ "B d d" = X + P\n')
    # Z's claim B d d fits neither P: its operand mismatch is its own, and its refuted claim
    # is about the same statement
    assert [(f.kind, f.line) for f in found] == [
        ("shape-mismatch", 10), ("operand-mismatch", 11), ("shape-mismatch", 11)]
    assert [f.caused_by for f in found] == [None, None, found[1]]


def test_a_wrong_claim_on_a_block_calls_output_comes_first_its_consequences_beneath():
    # later equations go on from the call's claim (the same under every way of setting the
    # choices the block consults): U trips over it, and V over U; both follow from O, listed
    # beneath it (one wrong O_h in the built-in spec gave 16 findings, each first in line,
    # each with a hint to change a correct declaration)
    found = findings_of(HEADER + 'block f(X "B T_x d") -> Y:\n    dim T_x "x"\n'
                        '    Y "B T_x d" = relu(X)\n'
                        'input Z "B T d"\nO "T T d" = f(Z)\nU "B T d" = relu(O)\n'
                        'V "B T d" = U + Z\n')
    assert [(f.kind, f.line) for f in found] == [
        ("shape-mismatch", 8), ("shape-mismatch", 9), ("operand-mismatch", 10),
        ("shape-mismatch", 10)]
    assert [len(rest) for _, rest in grouped(found)] == [3]
    assert found[0].hint == ('declare O as "B T d", or fix the equation; line 9 uses what its '
                             'equation gives')


def test_a_finding_follows_from_a_cause_only_where_that_cause_alone_removes_it():
    # S = Q @ K.T trips over both refuted claims: with Q's other value alone (or K's) it still
    # does not fit, so it follows from neither (it was listed beneath Q's: seed_004's S_ch)
    found = findings_of(HEADER + 'input X "B T d"\ninput Y "B T d"\nQ "B d d" = relu(X)\n'
                        'K "B d d" = relu(Y)\nS "B d d" = Q @ K.T\n')
    assert [(f.line, f.caused_by) for f in found] == [(6, None), (7, None), (8, None)]
    # what one first cause made doubtful through the findings that follow from it takes its
    # other value together
    found = findings_of(HEADER + 'input X "B T d"\nQ "B d d" = relu(X)\nK "B d d" = relu(Q)\n'
                        'V "B d d" = relu(Q)\nS "B d d" = K @ V.T\n')
    assert [f.line for f in found] == [5, 6, 7, 8]
    assert [cause for cause, _ in grouped(found)] == [found[0]]
    # a consequence's fix is its cause's (its own redeclaration, unchecked, was offered: K
    # declared as its equation gives, from Q's B T d)
    assert found[1].hint == "fix the shape-mismatch at line 5 first: this follows from it"


def test_findings_one_suggested_constraint_fixes_follow_the_first():
    # rotary's width, weakened to `require d_model % H == 0`: seven findings with one hint,
    # which pasted once removes them all (was: 7 findings)
    old = "        require d_model % (2*H) == 0\n"
    text = api.BUILTIN_SPEC.read_text()
    assert text.count(old) == 1
    weak = text.replace(old, "        require d_model % H == 0\n")
    found = check(tspec.parse(weak, "t.tspec"), all_choices=True).findings
    (cause, rest), = grouped(found)
    assert (cause.line, cause.kind, len(rest)) == (builtin_line("= rotary(Q_u)"),
                                                   "not-divisible", 6)
    assert {f.hint for f in found} == {cause.hint}
    pasted = weak + cause.hint.split("`")[1] + "\n"
    assert check(tspec.parse(pasted, "t.tspec"), all_choices=True).findings == []


def test_a_state_hint_offers_a_redeclaration_only_where_it_fixes():
    # the cross-attention cache started from the queries: declared as the queries are, it no
    # longer fits its use (was offered: 'or declare it "B T_past d_k"')
    text = api.BUILTIN_SPEC.read_text()
    old = "        state K_src[H] \"B T_x d_k\" \"the source's keys, per head\" from K_h\n"
    assert text.count(old) == 1
    choices = {"arch": "encoder_decoder", "decoding": "step"}
    finding = only(text.replace(old, old.replace("from K_h", "from Q_h")), choices=choices)
    use = builtin_line("scaled_dot_product_attention(Q_h, K_src, V_src, L_h)")
    assert (finding.line, finding.hint) == (
        builtin_line("state K_src[H] "), ('start K_src from a tensor of its shape (declared '
                                          f'"B T_past d_k", it would move the mismatch to line '
                                          f'{use})'))
    # declared wrong, where its start is right: the redeclaration fixes it, and is offered;
    # its use that does not fit follows from it
    found = findings_of(text.replace(old, old.replace('"B T_x d_k"', '"T T_x d_k"')),
                        choices=choices)
    assert [(f.line, f.caused_by is found[0]) for f in found] == [
        (builtin_line("state K_src[H] "), False), (use, True)]
    assert found[0].hint == 'start K_src from a tensor of its shape, or declare it "B T d_k"'


def test_the_same_statements_finding_under_other_sizes_follows_the_first():
    found = findings_of(HEADER + 'dim S "s"\nblock f(X "B T_x d") -> Y:\n    dim T_x "x"\n'
                        '    Y "T_x T_x d" = relu(X)\n'
                        'input Z "B T d"\ninput W "B S d"\nO "B T d" = f(Z) as one\n'
                        'Q "B S d" = f(W) as two\n')
    assert [(f.line, f.tensor, f.caused_by is None) for f in found] == [
        (7, "one.Y", True), (7, "two.Y", False)]


def test_consequences_in_a_block_follow_a_cause_outside_it():
    # P's equation gives T_dec rows; the block called with it binds T_x to T_dec, and what
    # trips there follows from P
    found = findings_of(HEADER + 'dim T_dec "t"\ndim L "rows"\nrequire T <= L\n'
                        'require T_dec <= L\nparam P_table "L d"\ninput X "B T d"\n'
                        'block g(A "B T_x d", C "T_x d") -> Y:\n    dim T_x "x"\n'
                        '    Y "B T_x d" = A + C\n'
                        'P "T d" = P_table[:T_dec]\nZ "B T d" = g(X, P)\n')
    assert [(f.kind, f.line, f.caused_by is None) for f in found] == [
        ("shape-mismatch", 13, True), ("argument-mismatch", 14, False)]


def test_findings_under_some_choices_say_which():
    finding = only(HEADER + 'dim e "other"\n'
                   'choice act = relu | gelu\nchoice pos = a | b\n'
                   'input X "B T d"\n'
                   'when act == gelu:\n'
                   '    Y "B T e" = gelu(X)\n'
                   'else:\n'
                   '    Y "B T d" = relu(X)\n', all_choices=True)
    assert (finding.kind, finding.line, finding.choices) == ("shape-mismatch", 9, "act=gelu")


def test_finding_text():
    finding = only(HEADER + 'input X "B T d"\nparam W "d d"\nY "B d d" = X @ W\n')
    assert finding.text() == (
        "t.tspec:6: shape-mismatch: Y is declared B d d but its equation gives B T d (axis 1)\n"
        "    equation: Y = X @ W\n"
        "    tensor: Y\n"
        "    expected: B d d\n"
        "    inferred: B T d\n"
        "    counterexample: T=2, d=1\n"
        '    hint: declare Y as "B T d", or fix the equation')


# ---------------------------------------------------------------------------------------------
# The base variant with a bad head count

def test_base_with_ten_heads():
    report = api.check(api.load("base", ["H=10"]))
    assert not report.ok
    assert len(report.findings) == 1
    finding = report.findings[0]
    assert finding.kind == "constraint-violated"
    assert finding.message == "d_model=512 is not divisible by H=10"
    assert "valid H near 10: 8, 16" in finding.hint
    assert finding.hint == "valid H near 10: 8, 16; valid d_model near 512: 510, 520"
    assert finding.dims == {"d_model": 512, "H": 10}
    assert finding.equation == "require d_model % H == 0"
    assert finding.scope == "variant"
    assert finding.file == api.BUILTIN_SPEC.as_posix()
    lines = api.BUILTIN_SPEC.read_text().splitlines()
    assert lines[finding.line - 1].strip() == "require d_model % H == 0"
    # the symbolic proof itself is clean: only the values are wrong
    assert report.proof.findings == []


@pytest.mark.parametrize("name", ["base", "big"])
def test_builtin_variants_have_no_findings(name):
    assert api.check(name).findings == []


# ---------------------------------------------------------------------------------------------
# Claims that hold for every allowed size must not be reported

@pytest.mark.parametrize("constraint", [
    pytest.param("require T <= L", id="non-strict"),
    pytest.param("require L >= T", id="non-strict-reversed"),
    pytest.param("require T == L", id="equality"),
])
def test_table_length_proved_from_a_constraint(constraint):
    assert findings_of(HEADER + f'dim L "table"\n{constraint}\nparam P "L d"\n'
                       'Y "T d" = P[:T]\n') == []


def test_strict_constraint_proves_the_table_length():
    assert findings_of(HEADER + 'dim L "table"\nrequire T < L\nparam P "L d"\n'
                       'Y "T d" = P[:T]\n') == []


def test_scaled_constraint_proves_the_table_length():
    assert findings_of(HEADER + 'dim L "table"\nrequire 2*T <= L\nparam P "L d"\n'
                       'Y "T d" = P[:T]\n') == []


def test_equality_constraint_proves_a_declared_shape():
    assert findings_of('dim B "batch"\ndim d_k "key width"\ndim d_v "value width"\n'
                       'require d_v == d_k\ninput X "B d_k"\nY "B d_v" = relu(X)\n') == []


@pytest.mark.parametrize("options, expected", [
    pytest.param("x | y", "c=x", id="two-options"),
    pytest.param("x | y | z", "c=x", id="three-options"),
])
def test_choices_of_a_finding_in_a_block_called_twice(options, expected):
    found = findings_of(HEADER + f'dim e "other"\nchoice c = {options}\n'
                        'block f(X "B d") -> Y:\n'
                        '    param W "e d"\n'
                        '    Y "B d" = X @ W\n'
                        'input Z "B d"\n'
                        'when c == x:\n'
                        '    O1 "B d" = f(Z) as one\n'
                        '    O2 "B d" = f(Z) as two\n', all_choices=True)
    assert [(f.kind, f.choices) for f in found] == [("operand-mismatch", expected)]


def test_a_mistake_in_a_block_called_twice_is_reported_once():
    found = findings_of(HEADER + 'dim e "other"\n'
                        'block f(X "B d") -> Y:\n'
                        '    param W "e d"\n'
                        '    Y "B d" = X @ W\n'
                        'input Z "B d"\n'
                        'O1 "B d" = f(Z) as one\n'
                        'O2 "B d" = f(Z) as two\n')
    assert [(f.kind, f.line, f.tensor) for f in found] == [("operand-mismatch", 7, "one.Y")]


# ---------------------------------------------------------------------------------------------
# Variant values that make a dim expression divide by zero

def test_values_that_zero_a_derived_dims_divisor():
    finding = only('dim d "width"\ndim H "heads"\ndim d_k "head width"\n'
                   'let d_k = d / (H - 1)\nrequire H >= 2\n', values={"d": 4, "H": 1})
    assert (finding.kind, finding.message) == ("constraint-violated",
                                               "H >= 2 does not hold for H=1")


def test_values_that_zero_a_modulus():
    finding = only('dim d "width"\ndim H "heads"\nrequire d % (H - 1) == 0\n',
                   values={"d": 4, "H": 1})
    assert (finding.kind, finding.line) == ("constraint-violated", 3)


def test_a_declared_shape_that_is_negative_under_the_values():
    assert findings_of('dim B "batch"\ndim T "length"\ninput X "B T-5"\n'
                       'Y "B T-5" = relu(X)\n', values={"T": 2}) != []


# A spec whose mistakes sit inside blocks, under choices the blocks consult, nested, and behind
# a call with no declared shape (whose choices its caller must set): the check under all
# choices must find exactly what checking each combination alone finds, in the same
# combinations.
_FACTORED = '''\
spec factored "mistakes under nested choices"
dim B "batch"
dim n "width"
dim m "other width"
choice a = x | y "a"
choice b = p | q | r "b"
choice c = u | v "c"
choice d = s | t "d"

block inner(X "B n") -> Y:
    param P "n m" "a projection"
    param Q "m" "a bias of the wrong width"
    when b == q:
        Y "B m" = X @ P
    else:
        when c == v:
            Y "B n" = X + Q
        else:
            Y "B n" = X

block middle(X "B n") -> Z:
    Y_1 "B n" = inner(X)
    when a == y:
        Z = inner(Y_1)
    else:
        Z "B n" = Y_1 + X

input x "B n"
when d == t:
    W "B n" = middle(x)
    output W
else:
    when c == u:
        W_2 "B m" = middle(x)
        output W_2
    else:
        V "B n" = middle(x)
        W_3 "B n" = V + x
        output W_3
'''


def test_checking_all_choices_at_once_finds_what_each_combination_finds():
    parsed = tspec.parse(_FACTORED, file="f.tspec")
    combos = combinations(parsed)
    assert len(combos) == 24
    alone: dict = {}
    for combo in combos:
        for finding in check(parsed, combo).findings:
            alone.setdefault(finding.key(), []).append(combo)
    together = check(parsed, all_choices=True).findings
    assert {f.key() for f in together} == set(alone)
    assert len(alone) >= 4            # the spec has mistakes in several places
    for finding in together:
        assert finding.choices == describe_combinations(alone[finding.key()], combos, parsed), \
            finding.text()
    # and the same under one choice held
    held = check(parsed, {"b": "q"}, all_choices=True).findings
    expected = {key for key, where in alone.items() if any(c["b"] == "q" for c in where)}
    assert {f.key() for f in held} == expected


# ---------------------------------------------------------------------------------------------
# Hints are advice people follow verbatim: each must be true

def test_a_hint_brackets_a_divisor_that_is_a_product():
    # was `require d % 2*H == 0`, which the parser reads as (d % 2) * H == 0
    finding = only('dim d "width"\ndim H "heads"\ndim d_k "half a head"\nlet d_k = d / (2*H)\n')
    assert finding.hint == "add the constraint `require d % (2*H) == 0`"
    assert finding.suggested == sympy.Eq(sympy.Mod(dim_symbol("d"), 2 * dim_symbol("H")), 0)


def test_no_hint_of_a_constraint_no_size_meets():
    # was `require m + n <= n`: no size meets it beside m >= 1
    finding = only('dim n "rows"\ndim m "start"\ndim d "width"\nparam P "n d"\n'
                   'Y "n d" = P[m:m + n]\n')
    assert (finding.kind, finding.message) == (
        "out-of-range", "slice stop vs table length: m+n must not exceed n")
    assert finding.hint == ("declare P (line 4) with a row for every position it serves: its n "
                            "rows do not cover m+n")
    assert finding.suggested is None


def test_no_hint_that_ties_the_input_lengths_together_points_at_the_table():
    # a learned table sized T_dec but indexed with T: was `require T <= T_dec`, which hides the
    # mistake (the encoder's length bounded by the decoder's); the table's declaration is it
    finding = only(HEADER + 'dim T_dec "target length"\ninput t "B T" int\n'
                   'input u "B T_dec" int\nparam P "T_dec d"\nY "T d" = P[:T]\n')
    assert finding.kind == "out-of-range"
    assert finding.hint == ("declare P (line 7) with a row for every position it serves: its "
                            "T_dec rows do not cover T")
    assert finding.suggested is None
    # a table of its own length is bounded by a constraint: that hint stays
    finding = only(HEADER + 'dim L "table length"\ninput t "B T" int\nparam P "L d"\n'
                   'Y "T d" = P[:T]\n')
    assert finding.hint == "add the constraint `require T <= L`"


def test_no_hint_of_a_constraint_on_the_inputs_lengths_for_a_mask():
    finding = only(HEADER + 'dim T_dec "target length"\ninput t "B T" int\n'
                   'input u "B T_dec" int\nM "T_dec T" bool = causal_mask(T_dec, T)\n')
    assert finding.hint == ("the queries (T_dec) are the last positions of the keys (T), so "
                            "never more: check the lengths the equation passes, queries first")
    assert finding.suggested is None


def test_nearest_values_are_judged_by_the_constraints_that_hold():
    # was "no valid d_model within 4095 of 384": H % H_kv, broken too, ruled out every d_model
    report = api.check("llama3_8b", ["d_model=384", "H=7"])
    hints = {f.equation: f.hint for f in report.findings}
    assert hints == {
        "require d_model % H == 0": "valid H near 7: 8; valid d_model near 384: 378, 392",
        "require H % H_kv == 0": "valid H near 7: 8; valid H_kv near 8: 7",
        "require d_model % (2 * H) == 0": "valid H near 7: 8; valid d_model near 384: 378, 392",
    }


def test_an_argument_mismatch_names_both_arguments_that_disagree():
    # cross-attention fed the decoder's keys: was blamed on the mask alone
    finding = only(HEADER + 'dim S "source length"\n'
                   'block attend(X_q "B T_q d", X_kv "B T_kv d", L "B T_q T_kv") -> O:\n'
                   '    dim T_q "q"\n    dim T_kv "k"\n'
                   '    O "B T_q d" = softmax(X_q @ X_kv.T + L, axis=-1) @ X_kv\n'
                   'input Y "B T d"\ninput Z "B S d"\ninput M "B T S"\n'
                   'A "B T d" = attend(Y, Y, M)\n')
    assert finding.kind == "argument-mismatch"
    # neither is known to be the one not meant: the disagreement leads, and neither shape is
    # "expected" (was: expected L's, "B T T", which read as the mask being wrong)
    assert finding.message == ("attend's inputs X_kv and L disagree on T_kv: Y (B T d), "
                               "passed as X_kv, gives T_kv = T, but M (B T S), passed as L, "
                               "gives T_kv = S")
    assert (finding.expected, finding.inferred) == (None, None)
    assert finding.hint == ("attend's inputs X_kv and L share T_kv: pass Y and M with one "
                            "T_kv, or check which of them is not the tensor meant")


def test_an_operand_mismatch_names_the_operands():
    finding = only(HEADER + 'dim T_dec "t"\ninput X "B T d"\ninput P "T_dec d"\n'
                   'Z "B T d" = relu(X) + P * 2\n')
    assert finding.message == ("add operands relu(X) (B T d) and P * 2 (T_dec d), axis -2: "
                               "T vs T_dec")
    assert finding.hint == ("T and T_dec must be the same size (or one of them 1, to "
                            "broadcast): check the declared shapes of X (line 5) and P (line 6)")


def test_a_declaration_far_from_its_use_is_named_with_its_line():
    # W_K declared H*d_k wide under grouped heads: the finding is at K_proj's equation, and
    # the hint named only that line ("fix the equation"), never W_K's
    text = api.BUILTIN_SPEC.read_text()
    old = 'param W_K "d_model H_kv*d_k"'
    assert text.count(old) == 1
    line = 1 + text[:text.index(old)].count("\n")
    equation = 1 + text[:text.index('K_proj "B T_kv H_kv*d_k"')].count("\n")
    spec = tspec.parse(text.replace(old, 'param W_K "d_model H*d_k"'), file="t.tspec")
    variant = api.load("llama3_8b")
    report = api.check(tspec.Variant("l83", spec, variant.dims, variant.choices))
    first = report.findings[0]
    assert (first.line, first.kind, first.caused_by) == (equation, "shape-mismatch", None)
    assert first.hint == (f'declare W_K (line {line}) as "d_model H_kv*d_k", or fix the '
                          'equation (declaring K_proj as "B T_dec H*d_k" would move the '
                          f'mismatch to line {equation + 18})')
    # one report: every other finding follows from it, as every command counts them
    assert all(f.caused_by is not None for f in report.findings[1:])
    assert summary(report.findings) == "1 finding and 9 consequences"


def test_a_declaration_the_claim_needs_is_offered_where_it_fixes_and_named_where_not():
    text = HEADER + 'input X "B T d"\nparam W "d T"\nY "B T d" = X @ W\nZ "B T T" = Y @ X.T\n'
    assert findings_of(text)[0].hint == (
        'declare W (line 5) as "d d", or fix the equation (declaring Y as "B T T" would move '
        'the mismatch to line 7)')
    # another use needs W as it is: redeclared, it would not fit there
    assert findings_of(text + 'U "B T T" = X @ W\n')[0].hint == (
        'fix the equation (declaring Y as "B T T" would move the mismatch to line 7); the '
        'equation\'s T comes from W, declared at line 5 as "d T"')


def test_findings_one_suggested_constraint_settles_are_grouped_beneath_the_first():
    # `require T <= max_len`, suggested for the rows taken, settles the relative offsets'
    # 2*T - 1 <= 2*max_len - 1 too, though that one's hint writes it otherwise: one fix,
    # one finding (they were two, as the README promises they are not)
    found = findings_of(HEADER + 'dim H "heads"\ndim max_len "positions"\n'
                        'param P "max_len d" "table"\nparam R[H] "2*max_len-1" "bias"\n'
                        'Q "T d" = P[:T]\nS[H] "T T" = relative_position_bias(R, T, T)\n')
    assert [(f.line, f.kind, f.caused_by is None) for f in found] == [
        (8, "out-of-range", True), (9, "out-of-range", False)]
    assert found[0].hint == "add the constraint `require T <= max_len`"
    assert summary(found) == "1 finding and 1 consequence"


def test_a_missing_dim_names_the_choice_that_needs_it():
    # d_v was said to be needed "under arch = decoder_only and norm = pre and decoding = full",
    # the path to the block that uses it, and placed at the variant's arch
    report = api.check("llama3_8b", ["head_dims=free"])
    said = {f.message: f.equation for f in report.findings if f.kind == "missing-dim"}
    assert said == {"d_k has no value, and the model uses it (under head_dims = free)":
                    "--set head_dims=free",
                    "d_v has no value, and the model uses it (under head_dims = free)":
                    "--set head_dims=free"}


def test_a_suggested_constraint_is_written_in_its_simplest_form():
    # it was `require 2*T - 1 <= 2*max_len - 1`, where the README promises `T <= max_len`
    finding = only(HEADER + 'dim H "heads"\ndim max_len "positions"\n'
                   'param R[H] "2*max_len-1" "bias"\nS[H] "T T" = relative_position_bias(R, T, T)\n')
    assert finding.message == ("relative offsets needed vs table length: 2*T-1 must not exceed "
                               "2*max_len-1")
    assert finding.hint == "add the constraint `require T <= max_len`"
