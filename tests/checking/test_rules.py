"""What the checker proves is what code generation and `tspec run` need: no spec that `tspec
check` proves is refused later, and no correct spec is left unproved for want of combining the
facts it states."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.command_line import run
from support.refusals import raises
from support.specs import TINY, builtin_line

import tspec
from tspec import api
from tspec.checking.check import check, combinations
from tspec.codegen.generate import source
from tspec.errors import SpecError
from tspec.execution.loading import load_source
from tspec.execution.run import run as run_variant
from tspec.language.variant import Variant

HEADS = '''\
spec heads "heads"
dim B "batch"
dim T "length"
dim d_model "width"
dim H "heads"
dim d_k "head width"
let d_k = d_model / H
require d_model % H == 0
require d_k % 2 == 0
input X "B T d_model" "input"
'''


def findings(text: str, choices=None, all_choices=True) -> list[tuple]:
    """Each finding's place, kind, message and counterexample (the hints' wording is pinned
    in test_findings)."""
    return [(f.where, f.kind, f.message, f.counterexample)
            for f in check(tspec.parse(text, "t.tspec"), choices,
                           all_choices=all_choices).findings]


# ---------------------------------------------------------------------------------------------
# Facts combined: divisibility through derived dims

def test_half_a_head_is_a_whole_number_when_the_head_width_is_even():
    """d_k = d_model / H with d_model % H == 0 and d_k % 2 == 0: d_k / 2 is whole (it used
    to be unproved, with a hint to add `require d_k % 2 == 0`, already there)."""
    text = HEADS + ('dim d_half "half a head"\nlet d_half = d_k / 2\n'
                    'param W "d_model d_half" "weight"\nY "B T d_half" "output" = X @ W\n')
    assert findings(text) == []


def test_twice_the_heads_divide_the_width_when_the_head_width_is_even():
    """d_model = H*q and q = 2*r: 2*H divides d_model, as split_heads(X, 2*H) needs."""
    text = HEADS + 'Y[2*H] "B T d_k/2" "half heads" = split_heads(X, 2*H)\n'
    assert findings(text) == []
    # without the parity, 2*H need not divide d_model: a counterexample, not a proof
    text = text.replace("require d_k % 2 == 0\n", "")
    assert findings(text) == [
        ("t.tspec:10", "not-divisible",
         "split_heads: heads must divide the last axis: 2*H must divide d_model",
         {"d_model": 1, "H": 1, "d_k": 1})]


def test_a_claim_a_nonlinear_constraint_states_is_proved_not_a_crash():
    """`require T*T <= d` and a slice of T*T rows of d: the prover divided by the slack's
    coefficient of T (zero) and sympy refused to compare the NaN (a TypeError)."""
    text = ('spec sq "squares"\ndim T "length"\ndim d "rows"\ndim e "width"\n'
            'require T*T <= d\nparam P "d e" "table"\nY "T*T e" "rows" = P[:T*T]\noutput Y\n')
    assert findings(text) == []


# ---------------------------------------------------------------------------------------------
# A state against the full model's tensor it starts from (issue 19: both proved, both refused
# by `tspec run`)

TRANSFORMER = (api.SPEC_DIR / "transformer.tspec").read_text()
KEY_CACHE = ('        state K_past[H] "B T_past d_k" "keys of the positions decoded before, per '
             'head" from K_h\n')
SOURCE_KEYS = '        state K_src[H] "B T_x d_k" "the source\'s keys, per head" from K_h\n'


def transformer_with(old: str, new: str) -> str:
    assert TRANSFORMER.count(old) == 1
    return TRANSFORMER.replace(old, new)


def test_a_key_cache_that_starts_from_the_values_is_a_finding_where_d_k_is_not_d_v():
    text = transformer_with(KEY_CACHE, KEY_CACHE.replace("from K_h", "from V_h"))
    line = TRANSFORMER[:TRANSFORMER.index(KEY_CACHE)].count("\n") + 1
    found = check(tspec.parse(text, "t.tspec"), {"arch": "decoder_only"},
                  all_choices=True).findings
    assert [(f.where, f.kind, f.message, f.expected, f.inferred, f.counterexample, f.choices)
            for f in found] == [
        (f"t.tspec:{line}", "shape-mismatch",
         ("state K_past is declared [H] B T_past d_k but prefill starts it as V_h, [H] B "
          "T_past d_v (V_h is [H] B T_dec d_v, over T_dec = T_past positions) (axis 2)"),
         "[H] B T_past d_k", "[H] B T_past d_v", {"d_k": 2, "d_v": 1},
         "head_dims=free, key_value_heads=all, decoding=step")]
    # where head_dims=split makes d_k = d_v, the shapes agree: proved, and generated
    source(tspec.parse(text, "t.tspec"), {"arch": "decoder_only"})


def test_cross_attention_keys_that_start_from_the_queries_are_a_finding():
    """The queries have the target's T_dec positions (T_past, in prefill), the state the
    source's T: `tspec run --decode` failed on the cache's length (a ValueError)."""
    text = transformer_with(SOURCE_KEYS, SOURCE_KEYS.replace("from K_h", "from Q_h"))
    line = TRANSFORMER[:TRANSFORMER.index(SOURCE_KEYS)].count("\n") + 1
    found = check(tspec.parse(text, "t.tspec"), {"arch": "encoder_decoder", "decoding": "step"}
                  ).findings
    assert [(f.where, f.kind, f.message, f.counterexample) for f in found] == [
        (f"t.tspec:{line}", "shape-mismatch",
         ("state K_src is declared [H] B T d_k but prefill starts it as Q_h, [H] B T_past "
          "d_k (Q_h is [H] B T_dec d_k, over T_dec = T_past positions) (axis 1)"),
         {"T": 2, "T_past": 1})]


STEP_INPUT = '        input u "B T_new" int "ids of the positions this step adds, each in 0..V-1"\n'


@pytest.mark.parametrize("edit, where, message", [
    # a cache updated with the new keys alone
    ((("        update K_past = K_h\n", "        update K_past = K_n\n"),),
     builtin_line("update K_past = K_h"),
     ("update K_past = K_n: K_n is [H] B T_new d_k (axis 1), where the next step's K_past is "
      "[H] B T_new+T_past d_k ([H] B T_past d_k with T_past + T_new for T_past: the positions "
      "it has and this step's new ones)")),
    # the step's ids renamed: an input the full model does not take
    (((STEP_INPUT, STEP_INPUT.replace("input u", "input w")),
      ('            X_dec "B T_new d_model" "the new positions\' token embeddings" = E[u]\n',
       '            X_dec "B T_new d_model" "the new positions\' token embeddings" = E[w]\n')),
     TRANSFORMER[:TRANSFORMER.index(STEP_INPUT)].count("\n") + 1,
     ("the decoding step takes w, which the full model does not: keep it in the cache as a "
          "state (`state ... from ...`)")),
])
def test_a_variant_is_checked_with_the_decoding_step_generate_emits_beside_it(
        tmp_path, capsys, edit, where, message):
    """A variant under decoding=full (the default) was proved by `tspec check`, while `tspec
    run` refused it: its code has a decoding step too, checked under decoding=step."""
    text = TRANSFORMER
    for old, new in edit:
        text = transformer_with(old, new) if text is TRANSFORMER else text.replace(old, new)
    (tmp_path / "v.tspec").write_text(text)
    (tmp_path / "v.toml").write_text(
        'spec = "v.tspec"\n[dims]\nd_model = 32\nH = 4\nd_ff = 16\nN = 1\nV = 50\n'
        '[choices]\narch = "decoder_only"\npositional = "sinusoidal"\n')
    report = api.check(str(tmp_path / "v.toml"))
    assert [(f.line, f.message, f.choices) for f in report.findings] == [
        (where, message, "decoding=step")]
    code, out, err = run(capsys, "check", str(tmp_path / "v.toml"))
    assert code == 1 and "proved" not in out
    # `tspec run` refuses it for the same finding, as `tspec check` reports it (it exited 2,
    # "spec transformer is not proved under ... decoding=step: 1 finding(s)")
    code, out, err = run(capsys, "run", str(tmp_path / "v.toml"))
    assert code == 1 and out == ""
    assert err.startswith(f"{tmp_path / 'v.tspec'}:{where}: ") and \
        err.endswith("tspec: 1 finding in v: nothing to run\n")


def test_a_decoding_step_is_checked_with_the_full_model_that_starts_it():
    """Under decoding=step the prefill's own findings were dropped: cross-attention fed the
    decoder's keys gave the states' findings, never its own, the cause."""
    old = "multi_head_attention(Y_1, Z_enc, L_cross_h) as cross_attention"
    text = transformer_with(old, old.replace("Z_enc", "Y_1"))
    found = check(tspec.parse(text, "t.tspec"), {"arch": "encoder_decoder", "decoding": "step"},
                  all_choices=True).findings
    states = [builtin_line(f"state {name} ") for name in
              ("K_src[H_kv]", "V_src[H_kv]", "K_src[H]", "V_src[H]")]
    assert [(f.line, f.kind, f.choices, f.caused_by is found[0]) for f in found] == [
        (builtin_line(old), "argument-mismatch", "norm=post, decoding=full", False),
        (states[0], "shape-mismatch", "norm=post, key_value_heads=grouped, decoding=step", True),
        (states[1], "shape-mismatch", "norm=post, key_value_heads=grouped, decoding=step", True),
        (states[2], "shape-mismatch", "norm=post, key_value_heads=all, decoding=step", True),
        (states[3], "shape-mismatch", "norm=post, key_value_heads=all, decoding=step", True)]
    # neither argument is "expected" (the mask was); the states say which is likelier wrong
    assert found[0].message == (
        "multi_head_attention's inputs X_kv and L_h disagree on T_kv: Y_1 (B T_dec d_model), "
        "passed as X_kv, gives T_kv = T_dec, but L_cross_h ([H] B T_dec T), passed as L_h, "
        "gives T_kv = T")
    assert found[0].hint.endswith(
        f"; with L_cross_h's T_kv (T), the states at lines {', '.join(map(str, states))} fit "
        "their starts: Y_1 is the likelier one not meant")


# ---------------------------------------------------------------------------------------------
# Every refusal of code generation or `tspec run` that a spec's content can cause: `tspec
# check` reports it first (a finding, or an error naming the line), or generation no longer
# refuses. The decoding step's own (a state outside a step, a `from` the full model does not
# compute, a step input the full model lacks, a block named like a step's function) are in
# test_decoding; the ops' (gathering from families, concatenating a family with one tensor,
# subtracting or negating masks) in test_codegen.

def test_a_block_called_with_a_family_where_it_takes_one_tensor_runs_on_each_member():
    """The checker applied the block to each member, and code generation refused ("does not
    map blocks over families"): now it stacks the block's result for each member, its
    parameters shared."""
    text = ('spec m "t"\ndim B "b"\ndim d "d"\ndim H "h"\nblock g(X "B d", S "B d") -> Y:\n'
            '    param W "d d" "w"\n    Y "B d" "y" = X @ W + S\ninput X[H] "B d" "x"\n'
            'input S "B d" "shared"\nZ[H] "B d" "z" = g(X, S) as each\noutput Z\n')
    assert findings(text) == []
    model = load_source(source(tspec.parse(text, "t.tspec"), {}), typecheck=True)
    rng = np.random.default_rng(0)
    X, S, W = rng.standard_normal((3, 2, 4)), rng.standard_normal((2, 4)), \
        rng.standard_normal((4, 4))
    trace: dict = {}
    np.testing.assert_allclose(model.m(X, S, {"each": {"W": W}}, trace=trace), X @ W + S,
                               rtol=1e-14)
    assert sorted(trace["each"]) == [0, 1, 2]          # each member's own trace


@pytest.mark.parametrize("call, block", [
    ('Z[H] "B d" "z" = repeat(2, f, X) as stack', "f"),      # a stack of copies
    ('Z[H] "B d" "z" = cached(X) as each', "cached"),        # a block that keeps states
])
def test_a_block_mapped_over_a_family_is_called_once_and_keeps_no_states(call, block):
    """Code generation applies a block to each member of a family only so."""
    text = ('spec m "t"\ndim B "b"\ndim d "d"\ndim H "h"\ndim T_past "past"\n'
            'choice decoding = full | step "whole or a step"\n'
            'block f(X "B d") -> Y:\n    Y "B d" "y" = relu(X)\n'
            'block cached(X "B d") -> Y:\n    state K "B T_past d" "keys" from X\n'
            '    Y "B d" "y" = relu(X)\n'
            f'input X[H] "B d" "x"\n{call}\noutput Z\n')
    with raises(SpecError, f"t.tspec:13: X is a family passed to {block}, which takes one "
                           "tensor: code generation applies a block to each member only where "
                           "it is called once and keeps no states"):
        check(tspec.parse(text, "t.tspec"), all_choices=True)


def test_a_parameter_no_equation_uses_still_needs_its_shape():
    text = ('spec u "t"\ndim B "b"\ndim d "d"\nparam W ? "w"\ninput X "B d" "x"\n'
            'Y "B d" "y" = relu(X)\noutput Y\n')
    assert findings(text) == [("t.tspec:4", "unstated-shape",
                               "parameter W has no stated shape, and nothing uses it to tell one",
                               None)]


@pytest.mark.parametrize("body, expected", [
    # log of a mask in a block given the mask alone: no float array to take the dtype from
    ('block lg(k "B T" bool) -> L:\n    L "B T" "l" = log(k)\nY "B T" "y" = lg(m) as g\n',
     lambda m: np.where(m, 0.0, -np.inf)),
    # and a float computed from the mask alone, whose memory check read it before it was
    # computed (an UnboundLocalError in the generated code)
    ('block half(k "B T" bool) -> L:\n    L "B T" "l" = k / 2\nY "B T" "y" = half(m) as g\n',
     lambda m: m / 2),
])
def test_a_function_with_no_float_array_in_scope_takes_the_dtype(body, expected):
    text = 'spec l "t"\ndim B "b"\ndim T "t"\ninput m "B T" bool "m"\n' + body + "output Y\n"
    model = load_source(source(tspec.parse(text, "t.tspec"), {}), typecheck=True)
    m = np.array([[True, False, True]])
    np.testing.assert_array_equal(model.l(m), expected(m))
    if "log" in body:
        assert model.l(m).dtype == np.float32
        assert model.l(m, dtype=np.float64).dtype == np.float64


def test_a_block_using_a_derived_dim_that_decoding_changes_gets_a_step_function():
    """`when decoding == step: let q = ...`: a block reading q differs between the full
    model and the step though it consults no `when`; lowering refused it ("differs between
    the full model and its decoding step but was not renamed")."""
    text = TINY.replace('choice decoding = full | step "the whole sequence, or one step"\n',
                        'choice decoding = full | step "the whole sequence, or one step"\n'
                        'dim q "a scale"\nwhen decoding == step:\n    let q = d * 2\n'
                        'else:\n    let q = d * 3\n')
    text = text.replace('block attend(', 'block scaled(X "B T_x d") -> Z:\n    dim T_x "l"\n'
                        '    Z "B T_x d" "z" = X * q\n\nblock attend(')
    text = text.replace('    Y "B T_x d" "output" = K + X\n',
                        '    Z "B T_x d" "z" = scaled(K) as s\n    Y "B T_x d" "output" = Z + X\n')
    assert findings(text) == []
    model = load_source(source(tspec.parse(text, "t.tspec"), {}))
    rng = np.random.default_rng(0)
    W, X = rng.standard_normal((3, 3)), rng.standard_normal((2, 5, 3))
    params = {"first": {"W": W, "s": {}}}
    Y, cache = model.prefill(X[:, :4], params)
    np.testing.assert_allclose(Y, X[:, :4] @ W * 9 + X[:, :4])          # q = 3 d, d = 3
    np.testing.assert_allclose(model.decode_step(X[:, 4:], params, cache),
                               X[:, 4:] @ W * 6 + X[:, 4:])              # q = 2 d
    # a block named as scaled's step function (once refused): the step is spelt scaled_step_
    named = text.replace('block attend(', 'block scaled_step(X "B d") -> Y:\n'
                         '    Y "B d" "y" = relu(X)\n\nblock attend(')
    other = load_source(source(tspec.parse(named, "t.tspec"), {}))
    assert callable(other.scaled_step_)
    Y_named, cache = other.prefill(X[:, :4], params)
    np.testing.assert_array_equal(Y_named, Y)
    np.testing.assert_allclose(other.decode_step(X[:, 4:], params, cache),
                               X[:, 4:] @ W * 6 + X[:, 4:])


@pytest.mark.parametrize("old, new, message", [
    # a step input whose positions axis is neither the new positions nor those so far: `tspec
    # run --decode` could not tell which of the full sequence's positions to pass
    ('input X "B T_new d" "the new positions\' input"', 'input X "B T_past d" "the past"',
     ("the decoding step takes X as B T_past d, whose axis 1 takes neither T_new nor "
      "T_new+T_past of the full model's B T d")),
    # a full model's input whose axis is twice the positions: prefill could not take the
    # prompt's part of it
    ('input X "B T d" "input"', 'input X "B T d" "input"\n    input R "B 2*T" "more"',
     ("the full model's input R (B 2*T) has an axis that is neither free of the sequence's "
      "positions (T) nor those positions: prefill cannot take the prompt's part of it")),
    # a step that takes the whole sequence beside the new positions: an input the full model
    # does not take (was: the step's inputs "lack 0 of the full model's input dims")
    ('input X "B T_new d" "the new positions\' input"',
     'input X "B T_new d" "new"\n    input S "B T d" "the whole sequence"',
     ("the decoding step takes S, which the full model does not: keep it in the cache as a "
      "state (`state ... from ...`)")),
    # a step whose inputs each fit the full model's, which takes another dim besides the
    # sequence's: prefill could not tell which to run over
    (('dim d "width"', 'input X "B T d" "input"'),
     ('dim d "width"\ndim e "other"', 'input X "B T d" "input"\n    input R "B e" "more"'),
     ("the decoding step's inputs lack 2 of the full model's input dims (T, e), where they "
      "must lack one: the sequence's positions, in whose place a step takes the new ones "
      "(T_new) and those so far (T_past + T_new)")),
    # the step's input of the full model's name whose other axis is another: the sequence is
    # still T, by the inputs that agree (was: T_dec, the one dim the step's inputs lacked)
    (('dim d "width"', 'input X "B T d" "input"', 'input X "B T_new d" "the new'),
     ('dim d "width"\ndim e "other"', 'input X "B T d" "input"\n    input m "B e" "mask"',
      'input m "B T" "mask"\n    input X "B T_new d" "the new'),
     "the decoding step takes m as B T, whose axis 1 is T where the full model's B e has e"),
])
def test_a_decoding_steps_inputs_are_parts_of_the_full_models(old, new, message):
    text = TINY
    for a, b in zip(*((old, new) if isinstance(old, tuple) else ((old,), (new,)))):
        assert text.count(a) == 1
        text = text.replace(a, b)
    found = findings(text)
    assert message in [f[2] for f in found], found


def test_a_decoding_model_with_no_inputs_at_all_is_a_finding_not_a_crash():
    text = TINY.replace('    input X "B T d" "input"\n', '').replace(
        '    input X "B T_new d" "the new positions\' input"\n', '').replace(
        "(X) as first", "(W0) as first").replace(
        "when decoding == full:", 'param W0 "B T d" "w"\nwhen decoding == full:')
    message = ("the decoding step's inputs lack 0 of the full model's input dims (none), "
               "where they must lack one: the sequence's positions, in whose place a step "
               "takes the new ones (T_new) and those so far (T_past + T_new)")
    assert ("t.tspec", "decoding-mismatch", message, None) in findings(text)


def test_tspec_run_decodes_a_spec_whose_sequence_is_not_called_t_dec(capsys, tmp_path):
    """TINY's full model runs over T, its step over T_new after T_past: `tspec run --decode`
    read T_dec and refused ('--decode takes 1 to T_dec - 1 = -1 steps')."""
    (tmp_path / "tiny.tspec").write_text(TINY)
    (tmp_path / "tiny.toml").write_text('spec = "tiny.tspec"\n[dims]\nd = 4\nT = 6\nB = 2\n')
    code, out, err = run(capsys, "run", str(tmp_path / "tiny.toml"), "--decode", "2")
    assert (code, err) == (0, "")
    assert "cache of the first layer after the last step:\n   first.K_past  2 x 6 x 4\n" in out
    assert "max abs difference 0.0e+00" in out


# ---------------------------------------------------------------------------------------------
# Random specs: what `tspec check` proves, code generation and `tspec run` accept

DECODER = '''\
spec r "random"
dim B "batch"
dim T "length"
dim T_past "positions decoded before"
dim T_new "positions a step adds"
dim d "width"
dim e "other width"
dim H "heads"
{choice}{lets}
block whole(X "B T_x d") -> Y:
    dim T_x "length"
    param W "d d" "weight"
    param U "d e" "other weight"
    K "B T_x d" "keys" = X @ W
    Kt "B d T_x" "keys, transposed" = K.T
    V "B T_x e" "values" = X @ U
    Y "B T_x d" "output" = {out}

block step(X "B T_x d") -> Y:
    dim T_x "positions a step adds"
    param W "d d" "weight"
    param U "d e" "other weight"
    state K_past "{state}" "keys so far" from {start}
    K "B T_x d" "new keys" = X @ W
    K_all "B T_past+T_x d" "every key" = concat(K_past, K, axis=-2)
    update K_past = K_all
    Y "B T_x d" "output" = {out}

{model}'''

MODELS = {
    "decoding": '''\
when decoding == step:
    input X "{step_input}" "the new positions"{step_extra}
    Y "{step_input}" "output" = step(X) as first
    output Y
else:
    input X "B T d" "every position"{full_extra}
    Y "B T d" "output" = whole(X) as first{extra}
    output Y{extra_output}
''',
    # states with no decoding step to keep them in
    "no step": '''\
input X "B T d" "every position"
Y "B T d" "output" = step(X) as first
output Y
''',
}

EXTRAS = {      # an equation code generation once refused, or mishandled, after a proof
    "": "",
    "log of a mask": '\n    input m "B T" bool "mask"\n    Z "B T" "log mask" = lg(m) as g',
    "half a mask": '\n    input m "B T" bool "mask"\n    Z "B T" "halves" = half(m) as h',
    "mask difference": '\n    input m "B T" bool "mask"\n    Z "B T" bool "difference" = m - m',
    "negated mask": '\n    input m "B T" bool "mask"\n    Z "B T" bool "negated" = -m',
    "family gather": ('\n    param E_h[H] "T d" "tables"\n    input t "B T" int "ids"'
                      '\n    Z[H] "B T d" "rows" = E_h[t]'),
    "family concat": ('\n    input A_h[H] "B T d" "family"'
                      '\n    Z[H] "B T 2*d" "joined" = concat(A_h, X, axis=-1)'),
    "mapped block": ('\n    input A_h[H] "B T d" "family"'
                     '\n    Z[H] "B T d" "mapped" = whole(A_h) as mapped'),
    "unused parameter": '\n    param P ? "unused"\n    Z "B T d" "copy" = X * 2',
}
HELPERS = ('block lg(k "B T_x" bool) -> L:\n    dim T_x "length"\n    L "B T_x" "log" = log(k)\n\n'
           'block half(k "B T_x" bool) -> L:\n    dim T_x "length"\n    L "B T_x" "half" = k / 2\n\n')


# each point of DECODER where a spec can go wrong: the choices that are sound, then those
# that are not (a finding or an error of the checker's, or once a refusal past a proof)
POINTS = {
    "extra": (["", "log of a mask", "half a mask", "mapped block"],
              ["mask difference", "negated mask", "family gather", "family concat",
               "unused parameter"]),
    "state": (["B T_past d"], ["B T_past e", "B d T_past"]),
    "start": (["K", "X", "Y"], ["Kt", "V", "K_all"]),
    "model": (["decoding"], ["no step"]),
    "step_input": (["B T_new d"], ["B T_past d", "B T_past+T_new d"]),
    "step_extra": ([""], ['\n    input Z "B T_new d" "more"']),
    "full_extra": (["", '\n    input R "B T" bool "more"'], ['\n    input R "B 2*T" "more"']),
}


@st.composite
def decoder_specs(draw):
    """A small model and its decoding step, sound but at one point at most (half of them
    sound throughout): a random state, `from`, step input, extra inputs, derived dim and one
    extra equation of a kind code generation once refused."""
    fault = draw(st.sampled_from([None] * len(POINTS) + list(POINTS)))
    pick = {point: draw(st.sampled_from(options[point == fault]))
            for point, options in POINTS.items()}
    lets = draw(st.sampled_from(["", 'dim q "a scale"\nlet q = d * 2\n',
                                 ('dim q "a scale"\nwhen decoding == step:\n    let q = d * 2\n'
                                  'else:\n    let q = d * 3\n')]))
    extra = EXTRAS[pick["extra"]]
    text = DECODER.format(
        choice='choice decoding = full | step "the whole sequence, or one step"\n',
        lets=lets, out=draw(st.sampled_from(["K + X", "relu(K) + X"] +
                                            (["K * q + X"] if lets else []))),
        state=pick["state"], start=pick["start"],
        model=MODELS[pick["model"]].format(
            step_input=pick["step_input"], step_extra=pick["step_extra"],
            full_extra=pick["full_extra"], extra=extra, extra_output=", Z" if extra else ""))
    return text.replace("block whole(", HELPERS + "block whole(") if extra else text


SIZES = {"B": 2, "T": 5, "d": 3, "e": 2, "H": 2}


@settings(max_examples=40, deadline=None)
@given(decoder_specs())
def test_what_tspec_check_proves_code_generation_and_tspec_run_accept(text):
    """No refusal of `tspec generate` or `tspec run` (a CodegenError or UsageError from the
    spec's content), nor any other exception, is left for a spec `tspec check` proves; and
    the decoding step's logits are the full forward's (every op here acts position by
    position, but where the step's q differs from the full model's by design)."""
    try:
        parsed = tspec.parse(text, "r.tspec")
        proved = not check(parsed, all_choices=True).findings
    except SpecError:
        return                                  # `tspec check` refuses it, naming the line
    if not proved:
        return
    for combo in combinations(parsed):
        source(parsed, combo)
    result = run_variant(Variant("r", parsed, dims=dict(SIZES)), dtype="float64",
                         decode_steps=2 if "decoding == step" in text else None)
    if result.decoded is not None and "when decoding == step:\n    let" not in text:
        assert result.decoded.difference < 1e-12     # (q = 2 d in the step, 3 d in full)


@settings(max_examples=40, deadline=None)
@given(decoder_specs())
def test_what_tspec_check_proves_of_one_combination_code_generation_accepts(text):
    """A variant is checked under its own choices: code generation under them makes the
    decoding step too (decoding=full) or needs the full model to start it, and must refuse
    nothing `tspec check` proved of that one combination (a step's mistakes were found only
    when the variant said decoding=step)."""
    try:
        parsed = tspec.parse(text, "r.tspec")
        combos = combinations(parsed)
        proved = [combo for combo in combos if not check(parsed, combo).findings]
    except SpecError:
        return
    for combo in proved:
        source(parsed, combo)


def test_a_variants_sizes_are_judged_in_the_model_it_runs():
    """The decoding step is proved with a variant, its sizes evaluated in the model the
    variant runs: a table of one row serves a full forward of one position (a step needs
    T_past + T_new >= 2 rows); a step's prefill is run to start its states, quietly."""
    assert api.check("base", ["positional=learned", "max_len=1", "T=1", "T_dec=1"]).ok
    assert api.check("base", ["decoding=step"]).ok
