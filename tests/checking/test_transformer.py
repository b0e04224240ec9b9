"""The built-in Transformer spec: proved under every choice; its shapes as the seeds name them."""

import math
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tspec
from tspec import api
from tspec.language.model import choices_in_force
from tspec.language.parser import parse
from tspec.language.variant import Variant


@pytest.fixture(scope="module")
def transformer():
    return tspec.load("transformer")


# the built-in spec's choice combinations, as its choices make them (a choice added to the
# spec changes the count, and no test here)
COMBINATIONS = math.prod(len(c.options) for c in api.load("transformer").spec.choices.values())


def of_all(count: int) -> str:
    """``count`` of the 110592 combinations the spec had when a test was written, as many of
    today's: each choice added since multiplies both (where the finding does not read it)."""
    return f"{count * COMBINATIONS // 110592} of {COMBINATIONS} combinations"


@pytest.fixture(scope="module")
def base_rows():
    return {row.name: row for row in api.shapes("base")}


@pytest.mark.slow
def test_builtin_spec_proves_under_all_its_choice_combinations(transformer):
    report = tspec.api.check(transformer)
    assert report.findings == []
    assert report.ok
    assert len(report.proof.combinations) == COMBINATIONS
    # every option of every choice appears
    for name, choice in transformer.spec.choices.items():
        assert {combo[name] for combo in report.proof.combinations} == set(choice.options)


@pytest.mark.slow
def test_encoder_io_is_in_force_only_in_encoder_only_models(transformer):
    """The choices a combination's statements consult: encoder_io only with arch=encoder_only,
    output_embedding not under encoder_io=bert or bert_unpooled (no vocabulary projection),
    decoding and attention_window only in models with a decoder; so the combinations select
    fewer different models."""
    combos = tspec.api.check(transformer).proof.combinations
    in_force = [choices_in_force(transformer.spec, combo) for combo in combos]
    for combo, used in zip(combos, in_force):
        assert ("encoder_io" in used) == (combo["arch"] == "encoder_only")
        assert ("output_embedding" in used) == \
            (used.get("encoder_io") not in ("bert", "bert_unpooled"))
        assert ("decoding" in used) == (combo["arch"] != "encoder_only")
        assert ("attention_window" in used) == (combo["arch"] != "encoder_only")
        assert set(used) | {"encoder_io", "output_embedding", "decoding",
                            "attention_window"} == set(combo)
    # every other choice is in force in every model: norm, activation, positional,
    # output_embedding, head_dims, attention_bias, normalization, ...
    options = {name: len(c.options) for name, c in transformer.spec.choices.items()}
    others = math.prod(n for name, n in options.items()
                       if name not in ("arch", "encoder_io", "decoding", "attention_window"))
    distinct = {tuple(used.items()) for used in in_force}
    # encoder-decoder and decoder-only, each in full and as a decoding step, each with full
    # or sliding-window self-attention; encoder-only: lm, and bert and bert_unpooled (with
    # no output_embedding)
    assert len(distinct) == 2 * 2 * 2 * others + others + 2 * (others // 2)


@pytest.mark.slow
def test_a_finding_in_one_model_is_reported_for_every_combination_that_selects_it():
    """A mistake under encoder_io=bert only (the pooler's weight declared d_model x V): found
    in the 72 models that have it, described by the choices that select it (output_embedding,
    not in force there, is left out)."""
    text = api.BUILTIN_SPEC.read_text().replace('param W_pool "d_model d_model"',
                                                'param W_pool "d_model V"')
    report = tspec.check(parse(text, str(api.BUILTIN_SPEC)))
    assert [(f.kind, f.tensor, f.choices) for f in report.findings] == [
        ("operand-mismatch", "C", "arch=encoder_only, encoder_io=bert"),
        ("shape-mismatch", "C", "arch=encoder_only, encoder_io=bert")]


@pytest.mark.parametrize("name, dims", [
    ("base", {"d_model": 512, "H": 8, "d_ff": 2048, "N": 6}),
    ("big", {"d_model": 1024, "H": 16, "d_ff": 4096, "N": 6}),
])
def test_builtin_variants_are_ok(name, dims):
    variant = api.load(name)
    assert variant.dims == dims
    assert variant.spec.name == "transformer"
    report = api.check(variant)
    assert report.ok and report.findings == []
    assert report.concrete is not None and report.concrete.findings == []


SEED_TENSORS = {
    # name as `tspec shapes base` prints it: (role, symbolic, concrete)
    "X": ("intermediate", "B T d_model", "B T 512"),
    "P": ("intermediate", "T d_model", "T 512"),
    "Z_0": ("intermediate", "B T d_model", "B T 512"),
    "encoder.layers[i].self_attention.Q_h": ("intermediate", "[H] B T d_k", "[8] B T 64"),
    "encoder.layers[i].self_attention.K_h": ("intermediate", "[H] B T d_k", "[8] B T 64"),
    "encoder.layers[i].self_attention.V_h": ("intermediate", "[H] B T d_v", "[8] B T 64"),
    "encoder.layers[i].self_attention.attention.S_h": ("intermediate", "[H] B T T",
                                                       "[8] B T T"),
    "encoder.layers[i].self_attention.attention.A_h": ("intermediate", "[H] B T T",
                                                       "[8] B T T"),
    "encoder.layers[i].self_attention.attention.O_h": ("output", "[H] B T d_v", "[8] B T 64"),
    "encoder.layers[i].self_attention.O": ("intermediate", "B T H*d_v", "B T 512"),
    "encoder.layers[i].self_attention.O_proj": ("output", "B T d_model", "B T 512"),
    "encoder.layers[i].Z_1": ("intermediate", "B T d_model", "B T 512"),
    "encoder.layers[i].F": ("intermediate", "B T d_model", "B T 512"),
    "encoder.layers[i].Z_out": ("output", "B T d_model", "B T 512"),
    "logits": ("output", "B T_dec V", "B T_dec V"),
    "probs": ("output", "B T_dec V", "B T_dec V"),
}


@pytest.mark.parametrize("name", list(SEED_TENSORS))
def test_every_intermediate_the_seeds_name_exists(base_rows, name):
    row = base_rows[name]
    assert (row.role, row.symbolic, row.concrete) == SEED_TENSORS[name]
    assert row.dtype == "float" and row.declared


def test_concrete_parameter_shapes_for_base(base_rows):
    assert (base_rows["encoder.layers[i].self_attention.W_Q"].symbolic,
            base_rows["encoder.layers[i].self_attention.W_Q"].concrete) == ("d_model H*d_k",
                                                                             "512 512")
    assert base_rows["encoder.layers[i].self_attention.W_O"].concrete == "512 512"
    assert base_rows["encoder.layers[i].feed_forward.W_1"].concrete == "512 2048"
    assert base_rows["decoder.layers[i].cross_attention.K_h"].concrete == "[8] B T 64"
    assert base_rows["decoder.layers[i].cross_attention.attention.S_h"].concrete == \
        "[8] B T_dec T"
    assert base_rows["E"].concrete == "V 512"
    assert base_rows["W_out"].concrete == "512 V"


def test_every_model_width_is_a_number_in_base(base_rows):
    bound = re.compile(r"\b(d_model|H|d_k|d_v|d_ff|N)\b")
    left = {name: row.concrete for name, row in base_rows.items() if bound.search(row.concrete)}
    assert left == {}


def test_row_names_are_unique():
    names = [row.name for row in api.shapes("base")]
    assert len(names) == len(set(names))


def test_decoder_only_has_no_encoder_and_no_cross_attention():
    rows = api.shapes(api.load("base", ["arch=decoder_only"]))
    names = [row.name for row in rows]
    assert not [n for n in names if "cross_attention" in n]
    assert not [n for n in names if n.startswith("encoder.")]
    assert "X" not in names and "Z_enc" not in names
    by_name = {row.name: row for row in rows}
    assert by_name["decoder.layers[i].self_attention.Q_h"].concrete == "[8] B T_dec 64"
    assert by_name["logits"].concrete == "B T_dec V"


def test_encoder_only_predicts_over_the_source():
    rows = {row.name: row for row in api.shapes(api.load("base", ["arch=encoder_only"]))}
    assert rows["logits"].symbolic == "B T V"
    assert not [n for n in rows if n.startswith("decoder.")]


def test_free_head_dims_keep_d_k_symbolic():
    # shown as declared: free head widths with no value are findings (missing-dim) of their own
    variant = api.load("base", ["head_dims=free"])
    assert [f.kind for f in api.check(variant).findings] == ["missing-dim", "missing-dim"]
    rows = {row.name: row for row in api.shapes(variant, proved=False)}
    q_h = rows["encoder.layers[i].self_attention.Q_h"]
    assert (q_h.symbolic, q_h.concrete) == ("[H] B T d_k", "[8] B T d_k")
    assert rows["encoder.layers[i].self_attention.W_Q"].concrete == "512 8*d_k"


# ---------------------------------------------------------------------------------------------
# Random variants

CHOICES = tspec.load("transformer").spec.choices


def choice_values():
    return st.fixed_dictionaries({name: st.sampled_from(choice.options)
                                  for name, choice in CHOICES.items()})


def needed(choices: dict, groups: int = 0, H: int = 1) -> dict:
    """The dims these choices use beside d_model, H, d_ff and N, and no other: a value given
    for a dim nothing uses is a finding, and so is a used dim without one."""
    divisors = [g for g in range(1, H + 1) if H % g == 0]
    dims = {"H_kv": divisors[groups % len(divisors)]} \
        if choices["key_value_heads"] == "grouped" else {}
    if choices["attention_window"] == "sliding" and choices["arch"] != "encoder_only":
        dims["W"] = 16
    if choices["head_dims"] == "free":
        dims |= {"d_k": 8, "d_v": 6}
    return dims


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(H=st.sampled_from([1, 2, 4, 6, 8, 12, 16, 32]), k=st.integers(1, 64),
       d_ff=st.integers(1, 8192), N=st.integers(1, 24), groups=st.integers(0, 7),
       choices=choice_values())
def test_random_valid_variants_check_clean(H, k, d_ff, N, groups, choices):
    transformer = tspec.load("transformer").spec
    # rotary positions need an even d_k; every other choice takes any multiple of H
    d_model = H * k * (2 if choices["positional"] == "rotary" else 1)
    # (the options no `when` consults left out: set, they are findings of their own)
    variant = Variant("random", transformer, {"d_model": d_model, "H": H, "d_ff": d_ff,
                                              "N": N} | needed(choices, groups, H),
                      choices_in_force(transformer, choices))
    report = api.check(variant)
    assert report.ok, [f.text() for f in report.findings]


def test_an_odd_width_takes_sinusoidal_positions_but_not_rotary_ones():
    # the sinusoidal table is defined at every width (an odd one ends with a sin column);
    # rotary turns pairs of a head's features, so it still needs d_k, here 57, even
    assert api.check(api.load("base", ["d_model=513", "H=9"])).ok
    report = api.check(api.load("base", ["d_model=513", "H=9", "positional=rotary"]))
    assert [(f.kind, f.message) for f in report.findings] == [
        ("constraint-violated", "d_model=513 is not divisible by 2*H=18")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(H=st.sampled_from([3, 4, 5, 6, 7, 8, 12, 16]), width=st.integers(1, 1200),
       choices=choice_values())
def test_random_divisibility_breaking_variants_have_one_finding(H, width, choices):
    # any width, but an even one under rotary positions (no H makes an odd one valid there)
    d_model = 2 * width if choices["positional"] == "rotary" else width
    assume(d_model % H != 0)
    transformer = tspec.load("transformer").spec
    choices = {**choices, "head_dims": "split"}
    variant = Variant("random", transformer, {"d_model": d_model, "H": H, "d_ff": 8, "N": 1}
                      | needed(choices, H=H), choices_in_force(transformer, choices))
    report = api.check(variant)
    rotary = [("constraint-violated", f"d_model={d_model} is not divisible by 2*H={2 * H}",
               "variant")] if choices["positional"] == "rotary" else []
    assert [(f.kind, f.message, f.scope) for f in report.findings] == [
        ("constraint-violated", f"d_model={d_model} is not divisible by H={H}", "variant")
    ] + rotary
    assert report.findings[0].hint.startswith(f"valid H near {H}: ")


# ---------------------------------------------------------------------------------------------
# Seed 004, transcribed with its mistakes

def test_seed_004_reports_the_seeds_shape_mistakes():
    report = api.check("seed_004")
    mismatches = sorted(f.tensor for f in report.findings if f.kind == "shape-mismatch")
    assert mismatches == ["P_dec", "decoder[i].K_ch", "decoder[i].O_h", "decoder[i].Q_ch",
                          "decoder[i].S_ch", "decoder[i].V_ch"]
    o_h = next(f for f in report.findings if f.tensor == "decoder[i].O_h")
    assert o_h.message == ("O_h is declared [H] B T d_v but its equation gives [H] B T_dec d_v "
                           "(axis 1)")
    assert o_h.counterexample == {"T": 2, "T_dec": 1}
    kinds = {f.kind for f in report.findings}
    assert kinds == {"shape-mismatch", "unstated-shape", "name-reused"}


# ---------------------------------------------------------------------------------------------
# Mistakes seeded into the built-in spec are caught

def check_mutated(old, new):
    text = api.BUILTIN_SPEC.read_text()
    assert text.count(old) == 1, old
    mutated = text.replace(old, new)
    report = tspec.check(tspec.Variant("m", tspec.parse(mutated, file="m.tspec"), is_spec=True))
    return report.findings, mutated.splitlines()


def line_of(lines, text):
    [number] = [i for i, line in enumerate(lines, 1) if line.strip().startswith(text)]
    return number


def test_scores_without_the_transpose_are_caught():
    findings, lines = check_mutated("= Q_h @ K_h.T / sqrt(d_k) + L_h",
                                    "= Q_h @ K_h / sqrt(d_k) + L_h")
    scores = line_of(lines, 'S_h[H] "B T_q T_kv" "scores, plus the additive mask')
    assert {f.line for f in findings} == {scores}
    assert {f.kind for f in findings} == {"operand-mismatch", "shape-mismatch"}
    inner = next(f for f in findings
                 if f.tensor == "encoder.layers[i].self_attention.attention.S_h"
                 and f.message.startswith("matmul"))
    assert inner.message == ("matmul inner dimensions of Q_h ([H] B T d_k) @ K_h ([H] B T d_k): "
                             "d_k vs T")
    assert inner.counterexample["T"] != inner.counterexample["d_k"]


@pytest.mark.slow
def test_removing_the_divisibility_constraint_is_caught():
    findings, lines = check_mutated("    require d_model % H == 0\n", "")
    not_integral = [f for f in findings if f.kind == "not-integral"]
    # under rotary positions, d_model % (2*H) == 0 still makes d_k and d_v whole
    assert [(f.line, f.message, f.choices) for f in not_integral[:2]] == [
        (line_of(lines, "let d_k"), ("derived dim d_k = d_model / H is not a whole number for "
         "every size the constraints allow"), ("positional=sinusoidal|learned|relative, "
         "head_dims=split")),
        (line_of(lines, "let d_v"), ("derived dim d_v = d_model / H is not a whole number for "
         "every size the constraints allow"), ("positional=sinusoidal|learned|relative, "
         "head_dims=split"))]
    # and the key-value heads' parameters, H_kv*d_k and H_kv*d_v wide, are then fractional,
    # declared once for the attention of the full models and the decoding step's cached
    # self-attention, which is built from it
    assert {(f.message, f.choices) for f in not_integral[2:]} == {
        ((f"size H_kv*d_{x} in the declared shape of {p}_{y} is not a whole number for every "
         "allowed size"),
         f"positional=sinusoidal|learned|relative, head_dims=split, {bias}key_value_heads=grouped")
        for x, y in (("k", "K"), ("v", "V"))
        for p, bias in (("W", ""), ("b", "attention_bias=all|qkv, "))}
    example = not_integral[0].counterexample
    assert example["d_model"] % example["H"] != 0
    assert not_integral[0].hint == "add the constraint `require d_model % H == 0`"


def test_removing_the_position_table_bound_is_caught():
    findings, _lines = check_mutated("        require T <= max_len\n", "        note \"bound removed\"\n")
    assert sorted((f.kind, f.tensor, f.message, f.choices) for f in findings) == [
        ("out-of-range", "P", "rows taken vs table length: T must not exceed max_len",
         f"arch=encoder_decoder|encoder_only, positional=learned ({of_all(13824)})"),
        ("out-of-range", "P_enc_h", ("relative offsets needed vs table length: 2*T-1 must not "
         "exceed 2*max_len-1"), ("arch=encoder_decoder|encoder_only, positional=relative "
                                 f"({of_all(13824)})")),
    ]


def test_a_position_table_bounds_only_the_lengths_the_model_has():
    # decoder-only: the source length T is unused, so T > max_len is no violation, only a
    # value set for nothing
    settings = ["arch=decoder_only", "positional=learned", "T=4096", "max_len=1024"]
    assert [f.message for f in tspec.check("base", settings).findings] == [
        "T is set but unused: it is used under arch = encoder_decoder or encoder_only"]
    report = tspec.check("base", ["arch=decoder_only", "positional=learned", "T_dec=2048",
                                 "max_len=1024"])
    assert [f.message for f in report.findings] == [
        "T_dec <= max_len does not hold for T_dec=2048, max_len=1024"]
    report = tspec.check("base", ["arch=encoder_only", "positional=learned", "T=2048",
                                 "max_len=1024", "T_dec=4096"])
    assert [f.message for f in report.findings] == [
        "T_dec is set but unused: it is used under arch = encoder_decoder or decoder_only",
        "T <= max_len does not hold for T=2048, max_len=1024"]
