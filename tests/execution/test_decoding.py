"""Incremental decoding: the key-value cache in the spec, prefill and decode_step.

The numbers: decoding a sequence step by step (one position at a time, then several at once)
gives the full forward's logits at every position, for decoder-only models (the seeds',
GPT-2-like, Llama-like with grouped-query attention and rotary positions, relative
positions) and the encoder-decoder; the cache grows by the new positions at each step. The
shapes: the cache's states and the step's tensors are proved by the checker like every other
tensor, and a cache that does not grow along its positions is a finding.
"""

import functools
import inspect
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.arrays import BACKENDS, CUPY, CUPY_ON_CPU, DEVICES, MARKS, NUMPY, keywords, to_numpy
from support.command_line import run
from support.compare import assert_close
from support.specs import TINY, settings_for

from tspec import api
from tspec.checking.check import check
from tspec.codegen.generate import source
from tspec.docs import site as docs
from tspec.errors import CodegenError, SpecError, SpecSyntaxError
from tspec.execution import weights
from tspec.execution.loading import load_source
from tspec.execution.run import decode, with_run_defaults
from tspec.language.parser import parse

SPEC = api.read_spec(api.BUILTIN_SPEC)

# decoder-only models as the seeds, GPT-2, Llama and T5-style relative positions have them
DECODERS = {
    "seeds": {"arch": "decoder_only"},
    "gpt2": {"arch": "decoder_only", "norm": "pre", "activation": "gelu_tanh",
             "positional": "learned", "attention_bias": "all", "output_embedding": "tied"},
    "llama": {"arch": "decoder_only", "norm": "pre", "activation": "swiglu",
              "positional": "rotary", "normalization": "rms_norm",
              "key_value_heads": "grouped", "feed_forward_bias": "none"},
    "multi_query": {"arch": "decoder_only", "positional": "rotary", "key_value_heads": "grouped",
                    "attention_bias": "all"},
    "relative": {"arch": "decoder_only", "norm": "pre", "positional": "relative"},
}
SIZES = {"d_model": 8, "H": 2, "d_ff": 12, "N": 2, "V": 11, "max_len": 12}


@functools.cache
def module(arrays=NUMPY, **choices):
    return arrays.load(source(SPEC, choices, arrays.backend))


def params_for(choices, dtype, **dims):
    sizes = SIZES | dims
    shapes = weights.expected_shapes(SPEC, choices, sizes)
    return weights.nest(weights.random_params(shapes, seed=1, dtype=dtype))


def by_position(logits):
    """The logits at each position, as named tensors for a per-position comparison."""
    return {f"logits at position {t}": logits[:, t] for t in range(logits.shape[1])}


def decode_in_steps(model, full_inputs, step_inputs, params, prompt, steps, dims,
                    arrays=NUMPY):
    """Logits of prefill over the first ``prompt`` positions, then of decode_step over the
    rest, ``steps`` positions a step (as NumPy arrays); and the length of the first layer's
    cached keys after each step. The inputs are moved to ``arrays``' backend."""
    forward = keywords(model.prefill, **dims)
    logits, _, cache = model.prefill(*arrays.put(full_inputs(0, prompt)), params, **forward)
    pieces, lengths = [to_numpy(logits)], []
    start = prompt
    for size in steps:
        step_logits, _ = model.decode_step(*arrays.put(step_inputs(start, start + size, cache)),
                                           params, cache, **keywords(model.decode_step, **dims))
        pieces.append(to_numpy(step_logits))
        lengths.append(cache["decoder"]["layers"][0]["self_attention"]["K_past"].shape[-2])
        start += size
    return np.concatenate(pieces, axis=1), lengths


@pytest.mark.parametrize("name", sorted(DECODERS))
@pytest.mark.parametrize("arrays, dtype", [
    pytest.param(arrays, dtype, id=f"{arrays}-{np.dtype(dtype).name}", marks=MARKS[arrays])
    for arrays in (NUMPY, CUPY, CUPY_ON_CPU)
    for dtype in ((np.float64, np.float32) + ((np.float16,) if arrays is not NUMPY else ()))])
def test_decoding_step_by_step_gives_the_full_forwards_logits(name, arrays, dtype):
    choices = DECODERS[name]
    model = module(arrays, **choices)
    dims = {"H": 2, "H_kv": 1}
    params = arrays.put(params_for(choices, dtype, H_kv=1))
    B, T = 2, 9
    rng = np.random.default_rng(7)
    u = rng.integers(0, SIZES["V"], (B, T))
    m = np.ones((B, T), dtype=bool)
    m[1, :2] = False                      # the second sequence is padded on the left
    reference, _ = model.transformer(*arrays.put((u, m)), params,
                                     **keywords(model.transformer, **dims))

    def full_inputs(start, stop):
        return u[:, start:stop], m[:, start:stop]

    def step_inputs(start, stop, cache):
        return u[:, start:stop], m[:, :stop]       # the key mask covers every position so far

    logits, lengths = decode_in_steps(model, full_inputs, step_inputs, params, prompt=4,
                                      steps=(1, 1, 3), dims=dims, arrays=arrays)
    assert lengths == [5, 6, 9]                      # the cache grows by each step's positions
    assert logits.dtype == dtype
    assert_close(by_position(logits), by_position(reference), np.dtype(dtype).name)


@pytest.mark.parametrize("positional", ["sinusoidal", "relative"])
@pytest.mark.parametrize("arrays", BACKENDS)
def test_encoder_decoder_decoding_gives_the_full_forwards_logits(arrays, positional):
    choices = {"arch": "encoder_decoder", "positional": positional, "norm": "pre"}
    model = module(arrays, **choices)
    params = arrays.put(params_for(choices, np.float64))
    B, T, T_dec = 2, 6, 7
    rng = np.random.default_rng(3)
    t, u = rng.integers(0, SIZES["V"], (B, T)), rng.integers(0, SIZES["V"], (B, T_dec))
    m_src, m_tgt = np.ones((B, T), dtype=bool), np.ones((B, T_dec), dtype=bool)
    m_src[0, -2:] = False
    reference, _ = model.transformer(*arrays.put((t, m_src, u, m_tgt)), params,
                                     **keywords(model.transformer, H=2))
    caches = []

    def full_inputs(start, stop):
        return t, m_src, u[:, start:stop], m_tgt[:, start:stop]

    def step_inputs(start, stop, cache):
        caches.append(cache)
        return m_src, u[:, start:stop], m_tgt[:, :stop]

    logits, lengths = decode_in_steps(model, full_inputs, step_inputs, params, prompt=3,
                                      steps=(1, 2, 1), dims={"H": 2}, arrays=arrays)
    assert lengths == [4, 6, 7]
    # the source's keys and values, computed once by prefill: (H, B, T, d_k)
    cross = caches[0]["decoder"]["layers"][1]["cross_attention"]
    assert cross["K_src"].shape == cross["V_src"].shape == (2, B, T, 4)
    assert_close(by_position(logits), by_position(reference), "float64")


def test_the_cache_holds_each_layers_keys_and_values_per_key_value_head():
    choices = DECODERS["llama"]
    model = module(**choices)
    params = params_for(choices, np.float64, H=4, H_kv=2, d_model=16)
    u = np.random.default_rng(0).integers(0, SIZES["V"], (3, 5))
    m = np.ones((3, 5), dtype=bool)
    _, _, cache = model.prefill(u, m, params, H=4, H_kv=2)
    layers = cache["decoder"]["layers"]
    assert isinstance(layers, list) and len(layers) == 2          # nested like params
    for layer in layers:
        states = layer["self_attention"]
        assert sorted(states) == ["K_past", "V_past"]
        # (H_kv, B, T_past, d_k): the family axis first, as every family in generated code
        assert states["K_past"].shape == (2, 3, 5, 4)
        assert states["V_past"].shape == (2, 3, 5, 4)
    model.decode_step(u[:, :1], np.ones((3, 6), dtype=bool), params, cache, H=4)
    assert layers[1]["self_attention"]["V_past"].shape == (2, 3, 6, 4)


def test_only_models_with_a_decoder_get_decoding_functions():
    for name, choices in [("encoder_only", {"arch": "encoder_only"}),
                          ("bert", {"arch": "encoder_only", "encoder_io": "bert"})]:
        text = source(SPEC, choices)
        assert "def prefill(" not in text and "def decode_step(" not in text, name
    text = source(SPEC, {"arch": "encoder_decoder"})
    for name in ("cached_self_attention", "cached_cross_attention", "decoder_layer_step",
                 "decoder_step", "decode_step", "prefill"):
        assert f"\ndef {name}(" in text, name
    # the encoder and the sublayers the step shares with the full model are generated once
    for name in ("encoder_step", "multi_head_attention_step", "feed_forward_step",
                 "decoder_layer_step_step"):
        assert f"\ndef {name}(" not in text, name


# ---------------------------------------------------------------------------------------------
# The spec: states and their updates are proved like every other tensor

def test_the_cache_shapes_are_proved_symbolically():
    choices = DECODERS["llama"] | {"decoding": "step"}
    result = check(SPEC, SPEC.choice_values(choices))
    assert result.findings == []
    rows = {row.name: row for row in result.tensors}
    state = rows["decoder.layers[i].self_attention.K_past"]
    assert (state.role, state.shape.text()) == ("state", "[H_kv] B T_past d_k")
    grown = rows["decoder.layers[i].self_attention.K_all"]
    assert grown.shape.text() == "[H_kv] B T_new+T_past d_k"
    assert rows["logits"].shape.text() == "B T_new V"
    assert rows["M_self"].shape.text() == "B T_new T_new+T_past"


CACHED = """\
spec cached "a cache"
dim B "batch"
dim T "length"
dim T_past "past"
dim T_new "new"
dim d "width"
choice decoding = full | step "the whole sequence, or one step"

block step(X "B T_new d") -> O:
    param W "d d" "weight"
    state K_past "B T_past d" "keys so far" from K
    K "B T_new d" "new keys" = X @ W
    K_all "B T_past+T_new d" "all keys" = concat(K_past, K, axis=-2)
    update K_past = {value}
    Y "B T_new T_past+T_new" "scores" = X @ K_all.T
    O "B T_new d" "output" = softmax(Y) @ K_all

block whole(X "B T d") -> O:
    param W "d d" "weight"
    K "B T d" "keys" = X @ W
    Y "B T T" "scores" = X @ K.T
    O "B T d" "output" = softmax(Y) @ K

when decoding == step:
    input X "B T_new d" "new positions"
    O "B T_new d" "output" = step(X) as first
else:
    input X "B T d" "every position"
    O "B T d" "output" = whole(X) as first
output O
"""
STEP = {"decoding": "step"}


HINT = ("update K_past with the state and this step's positions, shaped B T_new+T_past d "
        "(concat K_past and the new positions' values, axis=-2)")
NEXT = ("the next step's K_past is B T_new+T_past d (B T_past d with T_past + T_new for "
        "T_past: the positions it has and this step's new ones)")


def test_a_cache_that_does_not_grow_along_its_positions_is_a_finding():
    assert check(parse(CACHED.format(value="K_all")), all_choices=True).findings == []
    (wrong,) = check(parse(CACHED.format(value="Y")), STEP).findings
    assert (wrong.kind, wrong.line, wrong.hint) == ("shape-mismatch", 14, HINT)
    assert wrong.message == f"update K_past = Y: Y is B T_new T_new+T_past (axis 1, 2), where {NEXT}"


def test_a_cache_replaced_instead_of_extended_is_a_finding():
    (finding,) = check(parse(CACHED.format(value="K")), STEP).findings
    assert (finding.kind, finding.line, finding.tensor, finding.hint) == (
        "shape-mismatch", 14, "first.K_past", HINT)
    assert finding.message == f"update K_past = K: K is B T_new d (axis 1), where {NEXT}"
    assert finding.counterexample == {"T_past": 1, "T_new": 1}


def test_a_state_updated_twice_is_refused():
    text = CACHED.format(value="K_all").replace("    update K_past = K_all\n",
                                                "    update K_past = K_all\n"
                                                "    update K_past = K_all\n")
    with pytest.raises(SpecError) as raised:
        check(parse(text, "cached.tspec"), STEP)
    assert str(raised.value) == ("cached.tspec:15: update K_past is given twice in block step "
                                 "(first at line 14): a state has one next value")


def test_a_state_that_grows_without_its_update_is_a_finding():
    # the built-in spec without `update V_past = V_h` was proved, and decoding then failed at
    # its second step ("cache V_past axis -2 is 28, not T_past = 29")
    text = api.BUILTIN_SPEC.read_text()
    assert text.count("        update V_past = V_h\n") == 1
    spec = parse(text.replace("        update V_past = V_h\n", ""), "t.tspec")
    (finding,) = check(spec, {"arch": "decoder_only", "decoding": "full"},
                       all_choices=True).findings
    line = 1 + text[:text.index('state V_past[H] "B T_past d_v"')].count("\n")
    assert (finding.kind, finding.line, finding.tensor, finding.choices) == (
        "decoding-mismatch", line, "decoder.layers[i].self_attention.V_past",
        "key_value_heads=all, decoding=step")
    assert finding.message == (
        "state V_past ([H] B T_past d_v) grows with T_past (axis 1), but no `update V_past = "
        "...` writes it: after a step it holds the T_past positions it had, where the next "
        "step needs T_past + T_new")
    assert finding.hint == ("write its next value in the block that keeps it: `update V_past "
                            "= X`, X the state with this step's positions")


CAUSAL = """\
spec causal "attention over the positions so far, with a state {what}"
dim B "batch"
dim T "length"
dim T_past "past"
dim T_new "new"
dim d "width"
choice decoding = full | step "the whole sequence, or one step"

block step(X "B T_new d") -> O:
    param W "d d" "weight"
{step}
block whole(X "B T d") -> O:
    param W "d d" "weight"
    K "B T d" "keys" = X @ W
    L "T T" "the mask: no key after its query" = log(causal_mask(T, T))
{whole}
when decoding == step:
    input X "B T_new d" "new positions"
    O "B T_new d" "output" = step(X) as first
else:
    input X "B T d" "every position"
    O "B T d" "output" = whole(X) as first
output O
"""
LAST = '    L "T_new T_past+T_new" "the mask" = log(causal_mask(T_new, T_past+T_new))\n'
TRANSPOSED = CAUSAL.format(what="kept transposed", step=(
    '    state K_past "B d T_past" "keys so far, each a column" from K_t\n'
    '    K_t "B d T_new" "new keys, as columns" = (X @ W).T\n'
    '    K_all "B d T_past+T_new" "all keys" = concat(K_past, K_t, axis=-1)\n'
    '    update K_past = {value}\n' + LAST +
    '    O "B T_new d" "output" = softmax(X @ K_all + L) @ K_all.T\n'), whole=(
    '    K_t "B d T" "keys, as columns" = K.T\n'
    '    O "B T d" "output" = softmax(X @ K_t + L) @ K\n'))


def test_a_cache_kept_transposed_grows_along_its_last_axis_and_decodes():
    # refused before with "K_all has d positions where K_cache has d": the positions axis
    # was taken to be the second-to-last, whichever axis named T_past
    spec = parse(TRANSPOSED.format(value="K_all"), "t.tspec")
    assert check(spec, all_choices=True).findings == []
    (finding,) = check(parse(TRANSPOSED.format(value="K_t"), "t.tspec"), STEP).findings
    assert finding.message == (
        "update K_past = K_t: K_t is B d T_new (axis 2), where the next step's K_past is B d "
        "T_new+T_past (B d T_past with T_past + T_new for T_past: the positions it has and "
        "this step's new ones)")
    assert finding.hint == ("update K_past with the state and this step's positions, shaped "
                            "B d T_new+T_past (concat K_past and the new positions' values, "
                            "axis=-1)")
    decoded = api.decode(spec, 3, ["B=2", "T=6", "d=4"], dtype="float64")
    assert (decoded.prompt, decoded.steps) == (3, 3)
    assert decoded.difference <= decoded.tolerance
    assert [shape for _, shape in decoded.cache] == [(2, 4, 6)]   # B d T_past, all 6


# (its full model sums every position's keys, so a step is no prefix of it: checked, not run)
RUNNING = CAUSAL.format(what="of a fixed size", step=(
    '    state K_past "B T_past d" "keys so far" from K\n'
    '    K "B T_new d" "new keys" = X @ W\n'
    '    K_all "B T_past+T_new d" "all keys" = concat(K_past, K, axis=-2)\n'
    '    update K_past = K_all\n'
    '    state G_past "B d d" "the first keys\' Gram matrix so far" from G\n'
    '    G "B d d" "the Gram matrix, this step\'s keys added" = G_past + K.T @ K\n'
    '{gram}' + LAST +
    '    O "B T_new d" "output" = softmax(X @ K_all.T + L) @ K_all @ G\n'), whole=(
    '    G "B d d" "the keys\' Gram matrix" = K.T @ K\n'
    '    O "B T d" "output" = softmax(X @ K.T + L) @ K @ G\n'))


def test_a_state_of_fixed_size_the_sequence_changes_needs_its_update():
    # G_past has no T_past in its shape, but it starts from every position's keys: a step
    # that left it as prefill made it would read a stale sum (only a state started from
    # inputs a step never takes anew, a cross-attention's source, may go without)
    written = parse(RUNNING.format(gram="    update G_past = G\n"), "t.tspec")
    assert check(written, all_choices=True).findings == []
    (finding,) = check(parse(RUNNING.format(gram=""), "t.tspec"), STEP).findings
    assert (finding.kind, finding.line, finding.tensor) == (
        "decoding-mismatch", 15, "first.G_past")
    assert finding.message == (
        "state G_past is never updated, yet it starts from G, which is computed from the "
        "sequence's inputs (X): every step's new positions change it, and each step would read "
        "what prefill left")
    (finding,) = check(parse(RUNNING.format(gram="    update G_past = K\n"), "t.tspec"),
                       STEP).findings
    assert finding.message == ("update G_past = K: K is B T_new d (axis 1), where G_past "
                               "keeps its shape, B d d (nothing in it grows with T_past)")
    assert finding.hint == "update G_past with a tensor of its own shape, B d d"


@pytest.mark.parametrize("text, message", [
    (CACHED.format(value="K_all").replace("update K_past =", "update K_pas ="),
     "update: 'K_pas' is not a tensor of block step; did you mean 'K_past'?"),
    (CACHED.replace(" from K\n", "\n").format(value="K_all"),
     "state K_past: expected 'from' and the full model's tensor that prefill starts it as"),
    (CACHED.replace('state K_past "B T_past d" "keys so far"', "state K_past")
     .format(value="K_all"),
     "state K_past needs a shape in double quotes"),
    (CACHED.format(value="K_all") + 'state S "B d" "top" from Y\n',
     "'state' belongs in a block: each instance keeps its own"),
    (CACHED.format(value="K_all") + "update Y = Y\n",
     "'update' belongs in a block, beside its state"),
    (CACHED.format(value="K_all").replace("    update K_past = K_all",
                                           "    update K_past = K_all\n    update W = K_all"),
     ("update W: W is not a state of block step under decoding=step (declare it: "
      'state W "shape" from ...)')),
])
def test_bad_states_and_updates_say_what_and_where(text, message):
    with pytest.raises((SpecError, SpecSyntaxError)) as raised:
        check(parse(text, "cached.tspec"), all_choices=True)
    assert message in str(raised.value)
    assert "cached.tspec:" in str(raised.value)


@st.composite
def decoding_variants(draw):
    """A model with a decoder under random choices and small sizes, a sequence length, the
    prompt's length and the steps' sizes."""
    choices = {name: draw(st.sampled_from(choice.options))
               for name, choice in SPEC.choices.items() if name != "decoding"}
    choices["arch"] = draw(st.sampled_from(["decoder_only", "encoder_decoder"]))
    H = draw(st.integers(1, 3))
    dims = {"B": draw(st.integers(1, 3)), "T": draw(st.integers(1, 4)), "H": H,
            # rotary positions turn pairs of features; the others take any width
            "d_model": H * (2 * draw(st.integers(1, 2)) if choices["positional"] == "rotary"
                            else draw(st.integers(1, 4))), "d_ff": draw(st.integers(1, 6)),
            "V": draw(st.integers(2, 9)), "N": draw(st.integers(1, 2)), "V_type": 1}
    if choices["head_dims"] == "free":
        dims |= {"d_k": draw(st.sampled_from([2, 4])), "d_v": draw(st.integers(1, 3))}
    if choices["key_value_heads"] == "grouped":
        dims["H_kv"] = draw(st.sampled_from([g for g in range(1, H + 1) if H % g == 0]))
    if choices["attention_window"] == "sliding":      # shorter or longer than the sequence
        dims["W"] = draw(st.integers(1, 6))
    steps = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    prompt = draw(st.integers(1, 3))
    dims["T_dec"] = prompt + sum(steps)
    dims["max_len"] = max(dims["T"], dims["T_dec"]) + draw(st.integers(0, 2))
    return choices, dims, prompt, steps


@pytest.mark.slow
@pytest.mark.parametrize("arrays", BACKENDS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(decoding_variants())
# the seeds' decoder at an odd width: each step's sinusoidal rows end with a sin column
@example(({**{name: choice.options[0] for name, choice in SPEC.choices.items()
              if name != "decoding"}, "arch": "decoder_only"},
          {"B": 2, "T": 3, "H": 3, "d_model": 9, "d_ff": 4, "V": 7, "N": 2, "V_type": 1,
           "T_dec": 6, "max_len": 6}, 2, [1, 3]))
# Mistral's sliding window, shorter than the prompt and the steps: a step's keys start at T_past
@example(({**{name: choice.options[0] for name, choice in SPEC.choices.items()
              if name != "decoding"}, "arch": "decoder_only", "positional": "rotary",
           "attention_window": "sliding", "attention_bias": "qkv"},
          {"B": 2, "T": 3, "H": 2, "d_model": 8, "d_ff": 4, "V": 7, "N": 2, "V_type": 1,
           "T_dec": 7, "max_len": 7, "W": 2}, 3, [1, 2, 1]))
def test_random_models_decode_to_the_full_forwards_logits_in_the_proved_shapes(arrays, drawn):
    choices, dims, prompt, steps = drawn
    assert api.check(api.load("transformer", settings_for(SPEC, choices, dims))).ok
    model = module(arrays, **choices)
    params = arrays.put(weights.nest(weights.random_params(
        weights.expected_shapes(SPEC, choices, dims), 4, np.float64)))
    rng = np.random.default_rng(5)
    B, T, T_dec = dims["B"], dims["T"], dims["T_dec"]
    t, u = rng.integers(0, dims["V"], (B, T)), rng.integers(0, dims["V"], (B, T_dec))
    m_src, m_tgt = rng.random((B, T)) < 0.8, rng.random((B, T_dec)) < 0.8
    m_src[:, 0] = True
    encoder = choices["arch"] == "encoder_decoder"
    sources = (t, m_src) if encoder else ()
    reference, _ = model.transformer(*arrays.put((*sources, u, m_tgt)), params,
                                     **keywords(model.transformer, **dims))
    after = []

    def full_inputs(start, stop):
        return *sources, u[:, start:stop], m_tgt[:, start:stop]

    def step_inputs(start, stop, cache):
        after.append((start, cache))
        inputs = (m_src,) if encoder else ()
        return *inputs, u[:, start:stop], m_tgt[:, :stop]

    logits, _ = decode_in_steps(model, full_inputs, step_inputs, params, prompt, steps, dims,
                                arrays)
    assert_close(by_position(logits), by_position(reference), "float64")
    # the last step's cache, layer by layer, in the shapes the checker proved for the step
    start, cache = after[-1]
    step = api.load("transformer", settings_for(SPEC, {**choices, "decoding": "step"}, {
        **dims, "T_past": start, "T_new": T_dec - start}))
    proved = {row.name: (row.symbolic, row.concrete) for row in api.shapes(step)
              if row.role == "state"}
    assert proved
    for name, (symbolic, concrete) in proved.items():
        path = name.replace("[i]", "").split(".")
        for index in range(dims["N"]):
            states = cache
            for part in path[:-1]:
                states = states[part][index] if part == "layers" else states[part]
            # after the step a growing state holds T_past + T_new positions where T_past was
            # proved; the source's keys and values stay as they are
            shape = [int(x) for x in concrete.replace("[", "").replace("]", "").split()]
            if "T_past" in symbolic:
                shape[-2] = T_dec
            assert states[path[-1]].shape == tuple(shape), name


# ---------------------------------------------------------------------------------------------
# From the command line and the API

def test_tspec_run_decode_checks_every_step_against_the_full_forward(capsys):
    code, out, err = run(capsys, "run", "gpt2_small", "--set", "N=2", "--set", "V=97",
                         "--set", "T_dec=9", "--decode", "3", "--dtype", "float64")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    decoding = next(i for i, line in enumerate(lines) if line.startswith("decoding:"))
    assert lines[decoding].startswith("decoding: prefill of 6 positions ")
    assert "then 3 steps of one position: median " in lines[decoding]
    assert lines[decoding + 1:decoding + 4] == [
        "cache of the first layer after the last step:",
        "   decoder.layers.0.self_attention.K_past  12 x 2 x 9 x 64",
        "   decoder.layers.0.self_attention.V_past  12 x 2 x 9 x 64"]
    prefix = "logits of prefill and every step against the full forward: max abs difference "
    assert lines[decoding + 4].startswith(prefix)
    assert float(lines[decoding + 4][len(prefix):]) < 1e-10


def test_the_decode_api_reports_the_steps_and_the_largest_difference():
    variant = with_run_defaults(api.load("llama3_8b", [
        "N=2", "d_model=32", "H=4", "H_kv=2", "d_ff=24", "V=50", "T_dec=7"]))
    result = decode(variant, 4, dtype="float64")
    assert (result.prompt, result.steps, len(result.step_seconds)) == (3, 4, 4)
    assert result.cache == [("decoder.layers.0.self_attention.K_past", (2, 2, 7, 8)),
                            ("decoder.layers.0.self_attention.V_past", (2, 2, 7, 8))]
    assert result.difference < 1e-10


def test_tspec_run_decode_fails_when_decoding_gives_other_logits(capsys, tmp_path):
    # keys cached from the queries: the shapes agree (d_k both), so the checker proves it,
    # but the cache holds something other than what the full model computes. Before: the
    # difference (about 1) was printed and the command exited 0
    text = (api.checkout() / "spec" / "transformer.tspec").read_text()
    old = 'state K_past[H] "B T_past d_k" "keys of the positions decoded before, per head" from K_h'
    assert text.count(old) == 1
    (tmp_path / "wrong_cache.tspec").write_text(text.replace(old, old[:-3] + "Q_h"))
    (tmp_path / "v.toml").write_text(
        'spec = "wrong_cache.tspec"\n[dims]\nd_model = 16\nH = 2\nd_ff = 8\nN = 1\nV = 23\n'
        'T_dec = 6\n[choices]\narch = "decoder_only"\n')
    code, out, err = run(capsys, "run", str(tmp_path / "v.toml"), "--decode", "2")
    difference = float(out.splitlines()[-1].rsplit(" ", 1)[1])
    assert difference > 1e-2
    assert code == 1
    assert re.fullmatch(
        r"tspec: decoding gives other logits than the full forward: they differ by "
        r"\d\.\de[+-]\d\d, more than float32 rounding explains \(\d\.\de[+-]\d\d for "
        r"logits up to [0-9.e+-]+\); a state keeps something other than what the full model "
        r"computes there \(check each state's `from` and `update`\)\n", err)


@pytest.mark.parametrize("argv, message", [
    (["bert_base", "--decode", "3"],
     ("tspec: error: bert_base has no decoder to decode with (arch=encoder_only, decoding=full); "
     "--decode needs a decoder-only or encoder-decoder model under decoding=full\n")),
    (["base", "--decode", "32"],
     ("tspec: error: --decode takes 1 to T_dec - 1 = 31 steps (the rest of the T_dec=32 "
     "positions are the prompt), got 32\n")),
    (["base", "--set", "decoding=step"],
     ("tspec: error: tspec run runs a model whole; a decoding step needs the cache a prefill "
     "makes: leave decoding=full and pass --decode STEPS\n")),
])
def test_tspec_run_decode_refuses_what_it_cannot_decode(capsys, argv, message):
    code, out, err = run(capsys, "run", *argv)
    assert (code, out, err) == (2, "", message)


def test_the_docs_give_the_cache_per_layer_and_per_position():
    llama = docs.page(api.load("llama3_8b")).decoding
    # the last step of a sequence of T_dec = 512: 511 cached, one new
    assert (llama.positions, llama.sizes) == (511, {"T_past": 511, "T_new": 1})
    assert [row.cells[:3] for row in llama.states] == [
        ["`decoder.layers.self_attention.K_past`", "`[H_kv] B T_past d_k`", "$N$"],
        ["`decoder.layers.self_attention.V_past`", "`[H_kv] B T_past d_v`", "$N$"]]
    # keys and values, 32 layers, 8 key-value heads of 128, float32: 256 KiB a position
    assert llama.total[2] == f"256.0 KiB ({2 * 32 * 8 * 128 * 4:,} bytes)"
    assert llama.total[1] == f"127.8 MiB ({511 * 2 * 32 * 8 * 128 * 4:,} bytes)"
    base = docs.page(api.load("base")).decoding
    assert base.total[2] == f"24.0 KiB ({2 * 6 * 512 * 4:,} bytes)"
    assert docs.page(api.load("bert_base")).decoding is None
    text = (api.SPEC_DIR.parent / "docs" / "variants" / "llama3_8b.md").read_text()
    assert "## Decoding with a key-value cache" in text


# ---------------------------------------------------------------------------------------------
# Code generation for any spec with the choice `decoding`

def test_any_spec_with_states_gets_prefill_and_decode_step():
    model = load_source(source(parse(TINY, "tiny.tspec"), {}))
    rng = np.random.default_rng(0)
    W, X = rng.standard_normal((3, 3)), rng.standard_normal((2, 5, 3))
    params = {"first": {"W": W}}
    _, cache = model.prefill(X[:, :4], params)
    assert cache == {"first": {"K_past": cache["first"]["K_past"]}}
    np.testing.assert_array_equal(cache["first"]["K_past"], X[:, :4] @ W)
    model.decode_step(X[:, 4:], params, cache)
    np.testing.assert_allclose(cache["first"]["K_past"], X @ W, rtol=1e-15)


def decoding_findings(text: str) -> list[tuple]:
    """Each finding of `tspec check` on a variant of TINY: where, kind, message and the
    choices it holds under; and code generation refuses what is not proved."""
    parsed = parse(text, "tiny.tspec")
    found = [(f.where, f.kind, f.message, f.counterexample, f.choices)
             for f in check(parsed, all_choices=True).findings]
    with pytest.raises(CodegenError, match="is not proved under"):
        source(parsed, {})
    return found


def test_a_state_must_start_from_a_tensor_the_full_model_computes_at_its_place():
    """Once a refusal of code generation alone, which `tspec check` proved."""
    assert decoding_findings(TINY.replace("from K\n", "from K_gone\n")) == [
        ("tiny.tspec:18", "decoding-mismatch",
         "state K_past starts from K_gone, which the full model does not compute at first",
         None, "decoding=step")]


def test_a_step_that_names_a_call_otherwise_than_the_full_model_is_one_finding():
    # a decoder layer's step calling its self-attention `as self_attn`: each of its states
    # started from a place the full model does not have, four findings for one slip
    text = api.BUILTIN_SPEC.read_text()
    old = "cached_self_attention(Z_n, L_h) as self_attention"
    assert text.count(old) == 1
    spec = parse(text.replace(old, "cached_self_attention(Z_n, L_h) as self_attn"), "t.tspec")
    findings = check(spec, {"arch": "decoder_only", "norm": "pre"}, all_choices=True).findings
    cause, *rest = findings
    line = 1 + text[:text.index(old)].count("\n")
    assert (cause.line, cause.kind, cause.caused_by, cause.hint) == (
        line, "decoding-mismatch", None,
        "name the call as the full model names it at the same place (as self_attention)")
    assert cause.message == (
        "the decoding step calls cached_self_attention as self_attn in decoder.layers[i], "
        "where the full model calls no block of that name (it calls feed_forward, norm_1, "
        "norm_2, self_attention there): the states of self_attn start from tensors the full "
        "model does not compute")
    assert [(f.message.split(",")[0], f.caused_by is cause) for f in rest] == [
        ("state K_past starts from K_g", True), ("state V_past starts from V_g", True),
        ("state K_past starts from K_h", True), ("state V_past starts from V_h", True)]


def test_a_cross_attention_called_with_its_arguments_swapped_is_one_finding_first():
    # multi_head_attention(Z_enc, Y_1, L_cross_h): the four cross-attention states came
    # first, as findings of their own, and the real mistake last; its arguments disagree on
    # T_q and T_kv both, and with the later ones' values the states fit their starts
    text = api.BUILTIN_SPEC.read_text()
    old = "multi_head_attention(Y_1, Z_enc, L_cross_h) as cross_attention"
    assert text.count(old) == 1
    spec = parse(text.replace(old, "multi_head_attention(Z_enc, Y_1, L_cross_h) as "
                                   "cross_attention"), "t.tspec")
    cause, *rest = check(spec, {"arch": "encoder_decoder"}, all_choices=True).findings
    line = 1 + text[:text.index(old)].count("\n")
    assert (cause.line, cause.kind) == (line, "argument-mismatch")
    assert cause.message.startswith("multi_head_attention's inputs X_q and L_h disagree on T_q")
    assert rest and all(f.caused_by is cause for f in rest)
    assert {f.line for f in rest if f.message.startswith("state ")} == {
        1 + text[:text.index(f'state {name}[{heads}] "B T_x')].count("\n")
        for name in ("K_src", "V_src") for heads in ("H_kv", "H")}


def test_a_step_call_that_binds_a_states_length_from_the_wrong_argument_is_one_finding():
    # the cross-attention of a step given the self-attention mask: T_x (the source's length)
    # bound to T_past + T_new; four state findings, each its own cause, none at the call
    text = api.BUILTIN_SPEC.read_text()
    old = "cached_cross_attention(Y_1, L_cross_h)"
    assert text.count(old) == 1
    spec = parse(text.replace(old, "cached_cross_attention(Y_1, L_self_h)"), "t.tspec")
    cause, *rest = check(spec, {"arch": "encoder_decoder"}, all_choices=True).findings
    assert (cause.line, cause.kind) == (1 + text[:text.index(old)].count("\n"),
                                        "decoding-mismatch")
    assert cause.message == (
        "cached_cross_attention's T_x is bound by L_self_h, passed as L_h, to T_new+T_past, "
        "where prefill starts its state K_src over T: the states of cross_attention misfit "
        "their starts")
    assert len(rest) == 4 and all(f.caused_by is cause for f in rest)


def test_a_decoding_step_takes_only_inputs_the_full_model_takes():
    text = TINY.replace('X "B T_new d" "the new positions\' input"',
                        'X "B T_new d" "the new input"\n    input Z "B T_new d" "more"')
    assert decoding_findings(text) == [
        ("tiny.tspec:29", "decoding-mismatch",
         ("the decoding step takes Z, which the full model does not: keep it in the cache as "
          "a state (`state ... from ...`)"), None, "decoding=step")]


def test_a_block_named_like_a_steps_function_is_spelt_apart():
    """Once refused: a block named attend_step beside a block attend whose decoding step is
    a function of its own. Generated code names that step attend_step_ (the block keeps its
    name), and the model computes what it does with the block named otherwise."""
    text = TINY.replace(
        '    Y "B T_x d" "output" = K + X\n\nblock attend_cached',
        '    when decoding == step:\n        Y "B T_x d" "output" = K - X\n'
        '    else:\n        Y "B T_x d" "output" = K + X\n\n'
        'block {name}(X "B T_x d") -> Y:\n    dim T_x "length"\n'
        '    Y "B T_x d" "output" = X + X\n\nblock attend_cached')
    for length, ids in (("T", "first"), ("T_new", "first")):
        whole = f'attend_cached(X) as {ids}' if length == "T_new" else f'attend(X) as {ids}'
        text = text.replace(
            f'    Y "B {length} d" ' + ('"output at the new positions"' if length == "T_new"
                                       else '"output"') + f' = {whole}\n',
            f'    Y "B {length} d" "output" = {whole}\n'
            f'    Z "B {length} d" "second" = attend(Y) as second\n'
            f'    Z_2 "B {length} d" "third" = {{name}}(Z) as third\n')
    text = text.replace("output Y\n", "output Z_2\n")
    assert text.count("attend(Y) as second") == 2
    rng = np.random.default_rng(6)
    params = {"first": {"W": rng.standard_normal((3, 3))},
              "second": {"W": rng.standard_normal((3, 3))}}
    X = rng.standard_normal((2, 5, 3))
    results = {}
    for name in ("attend_step", "other"):
        model = load_source(source(parse(text.format(name=name), "tiny.tspec"), {}),
                            private=True)
        functions = {n for n, value in vars(model).items() if inspect.isfunction(value)}
        assert {"attend", name, "attend_step_" if name == "attend_step" else "attend_step",
                "attend_cached", "tiny", "prefill", "decode_step"} <= functions
        first, cache = model.prefill(X[:, :4], params)
        results[name] = first, model.decode_step(X[:, 4:], params, cache)
    for got, expected in zip(results["attend_step"], results["other"]):
        np.testing.assert_array_equal(got, expected)


def test_the_full_forward_may_not_read_states():
    text = TINY.replace("    Y \"B T d\" \"output\" = attend(X) as first",
                        "    Y \"B T d\" \"output\" = attend_cached(X) as first")
    text = text.replace('input X "B T d" "input"', 'input X "B T_new d" "input"').replace(
        'Y "B T d" "output" = attend_cached', 'Y "B T_new d" "output" = attend_cached')
    found = decoding_findings(text)
    assert found[0] == (
        "tiny.tspec:18", "decoding-mismatch",
        ("state K_past is kept where the model runs whole: a full forward keeps no states, "
         "only a decoding step (under `decoding == step`, a choice `decoding = full | step`)"),
        None, "decoding=full")
    # under decoding=step, this full model gives a state of T_new positions: refuted too
    assert [f[1] for f in found[1:]] == ["shape-mismatch", "decoding-mismatch"]


def test_a_state_must_start_as_a_tensor_of_its_shape():
    text = TINY.replace('    Y "B T_x d" "output" = K + X\n\nblock attend_cached',
                        '    Kt "B d T_x" "keys, transposed" = K.T\n'
                        '    Y "B T_x d" "output" = K + X\n\nblock attend_cached')
    text = text.replace("from K\n", "from Kt\n")
    assert decoding_findings(text) == [
        ("tiny.tspec:19", "shape-mismatch",
         ("state K_past is declared B T_past d but prefill starts it as Kt, B d T_past (Kt is "
          "B d T, over T = T_past positions) (axis 1, 2)"), {"T_past": 2, "d": 1},
         "decoding=step")]


@pytest.mark.parametrize("name", sorted(DECODERS))
@pytest.mark.parametrize("device", DEVICES)
def test_cupy_decoding_matches_the_numpy_full_forward(device, name):
    """The CuPy module's prefill and decode_step (on the GPU, and on the CPU through the
    stand-in) against NumPy's full forward, one position a step and then two."""
    choices = DECODERS[name]
    model = module(device, **choices)
    reference_model = module(**choices)
    dims = {"H": 2, "H_kv": 1}
    params = params_for(choices, np.float64, H_kv=1)
    u = np.random.default_rng(2).integers(0, SIZES["V"], (2, 8))
    m = np.ones((2, 8), dtype=bool)
    m[0, :2] = False
    reference, _ = reference_model.transformer(u, m, params,
                                               **keywords(reference_model.transformer, **dims))

    def full_inputs(start, stop):
        return u[:, start:stop], m[:, start:stop]

    def step_inputs(start, stop, cache):
        return u[:, start:stop], m[:, :stop]

    logits, lengths = decode_in_steps(model, full_inputs, step_inputs, device.put(params),
                                      prompt=4, steps=(1, 1, 2), dims=dims, arrays=device)
    assert lengths == [5, 6, 8]
    assert_close(by_position(logits), by_position(reference), "float64")


# ---------------------------------------------------------------------------------------------
# Against an independent key-value cache: Hugging Face GPT-2 with past_key_values

@pytest.mark.reference
@pytest.mark.parametrize("arrays", BACKENDS)
def test_decoding_matches_hugging_face_gpt2_with_its_own_cache_step_by_step(arrays):
    """Hugging Face's GPT2LMHeadModel decodes with its own cache (DynamicCache); ours with
    prefill and decode_step. Every step's logits and every layer's cached keys and values
    agree (its cache is (B, H, T_past, d_k), ours (H, B, T_past, d_k)); ours on each backend,
    theirs on the CPU or, beside CuPy on a GPU, on CUDA."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tspec.execution import checkpoints
    torch.manual_seed(5)
    config = transformers.GPT2Config(vocab_size=SIZES["V"], n_positions=12, n_embd=8, n_layer=2,
                                     n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    reference = transformers.GPT2LMHeadModel(config).double().eval().to(arrays.device)
    params = arrays.put(weights.nest(checkpoints.from_gpt2(reference.state_dict())))
    model = module(arrays, **DECODERS["gpt2"])
    u = np.random.default_rng(6).integers(0, SIZES["V"], (2, 9))
    m = np.ones(u.shape, dtype=bool)
    with torch.no_grad():
        output = reference(torch.tensor(u[:, :5], device=arrays.device), use_cache=True)
        theirs, past = [output.logits.cpu().numpy()], output.past_key_values
        ours, _, cache = model.prefill(*arrays.put((u[:, :5], m[:, :5])), params, H=2)
        ours = [to_numpy(ours)]
        for t in range(5, 9):
            step = reference(torch.tensor(u[:, t:t + 1], device=arrays.device),
                             past_key_values=past, use_cache=True)
            theirs.append(step.logits.cpu().numpy())
            logits, _ = model.decode_step(*arrays.put((u[:, t:t + 1], m[:, :t + 1])), params,
                                          cache)
            ours.append(to_numpy(logits))
    compared = by_position(np.concatenate(ours, axis=1))
    expected = by_position(np.concatenate(theirs, axis=1))
    for i, layer in enumerate(past.layers):
        states = cache["decoder"]["layers"][i]["self_attention"]
        compared |= {f"layer {i} K_past": states["K_past"], f"layer {i} V_past": states["V_past"]}
        expected |= {f"layer {i} K_past": layer.keys.cpu().numpy().transpose(1, 0, 2, 3),
                     f"layer {i} V_past": layer.values.cpu().numpy().transpose(1, 0, 2, 3)}
    rows = assert_close(compared, expected, "float64")
    assert len(rows) == 9 + 4


# ---------------------------------------------------------------------------------------------
# A step given the wrong cache or mask says so instead of computing something else

@pytest.fixture(scope="module", params=BACKENDS)
def gpt2_prefilled(request):
    """GPT-2's model on a backend (NumPy, CuPy, CuPy on the CPU), its parameters there, ids,
    and a function that moves arrays there."""
    arrays = request.param
    choices = DECODERS["gpt2"]
    model = module(arrays, **choices)
    params = arrays.put(params_for(choices, np.float64))
    u = arrays.put(np.random.default_rng(8).integers(0, SIZES["V"], (2, 6)))
    return model, params, u, arrays.put


def fresh_cache(gpt2_prefilled):
    model, params, u, put = gpt2_prefilled
    return model.prefill(u[:, :4], put(np.ones((2, 4), dtype=bool)), params, H=2)[2]


@pytest.mark.parametrize("mask_length, message", [
    (4, ("L_h axis -1 is 4, not T_past + T_x = 5: pass the cache prefill made for these inputs, "
        "and the key mask of every position so far")),
    (6, ("L_h axis -1 is 6, not T_past + T_x = 5: pass the cache prefill made for these inputs, "
        "and the key mask of every position so far")),
])
def test_a_step_with_a_mask_of_the_wrong_length_is_refused(gpt2_prefilled, mask_length,
                                                          message):
    model, params, u, put = gpt2_prefilled
    with pytest.raises(ValueError) as raised:
        model.decode_step(u[:, 4:5], put(np.ones((2, mask_length), dtype=bool)), params,
                          fresh_cache(gpt2_prefilled))
    assert str(raised.value) == message


def test_a_step_with_a_cache_of_another_dtype_is_refused(gpt2_prefilled):
    model, params, u, put = gpt2_prefilled
    cache = fresh_cache(gpt2_prefilled)
    states = cache["decoder"]["layers"][1]["self_attention"]
    states["K_past"] = states["K_past"].astype(np.float32)
    with pytest.raises(ValueError) as raised:
        model.decode_step(u[:, 4:5], put(np.ones((2, 5), dtype=bool)), params, cache)
    assert str(raised.value) == ("cache['decoder']['layers'][1]['self_attention']['K_past'] is "
                                 "float32 but the parameters are float64: pass the cache "
                                 "prefill returned")


@pytest.mark.parametrize("spoil, message", [
    (lambda cache: cache.clear(),
     "cache['decoder'] is missing: pass the cache prefill returned"),
    (lambda cache: cache["decoder"]["layers"].pop(),
     "cache['decoder']['layers'] must be a list of 2 layers, one for each of params['layers']"),
    (lambda cache: cache["decoder"]["layers"][1]["self_attention"].pop("V_past"),
     ("cache['decoder']['layers'][1]['self_attention']['V_past'] is missing: pass the cache "
     "prefill returned")),
    (lambda cache: cache["decoder"]["layers"][0]["self_attention"].update(
        K_past=cache["decoder"]["layers"][0]["self_attention"]["K_past"][:, :1]),
     ("cache K_past axis -3 is 1, not B = 2: pass the cache prefill made for these inputs, and "
     "the key mask of every position so far")),
    (lambda cache: cache["decoder"]["layers"][0]["self_attention"].update(
        V_past=cache["decoder"]["layers"][0]["self_attention"]["V_past"][:, :, :3]),
     ("cache V_past axis -2 is 3, not T_past = 4: pass the cache prefill made for these "
     "inputs, and the key mask of every position so far")),
])
def test_a_step_with_a_cache_that_is_not_prefills_is_refused(gpt2_prefilled, spoil, message):
    model, params, u, put = gpt2_prefilled
    cache = fresh_cache(gpt2_prefilled)
    spoil(cache)
    with pytest.raises(ValueError) as raised:
        model.decode_step(u[:, 4:5], put(np.ones((2, 5), dtype=bool)), params, cache)
    assert str(raised.value) == message


@pytest.mark.parametrize("arrays", BACKENDS)
def test_an_encoder_decoder_step_with_another_source_length_is_refused(arrays):
    choices = {"arch": "encoder_decoder"}
    model = module(arrays, **choices)
    params = arrays.put(params_for(choices, np.float64))
    rng = np.random.default_rng(9)
    t, u = rng.integers(0, SIZES["V"], (2, 5)), rng.integers(0, SIZES["V"], (2, 4))
    _, _, cache = model.prefill(*arrays.put((t, np.ones((2, 5), dtype=bool), u[:, :3],
                                             np.ones((2, 3), dtype=bool))), params, H=2)
    with pytest.raises(ValueError) as raised:
        model.decode_step(*arrays.put((np.ones((2, 3), dtype=bool), u[:, 3:],
                                       np.ones((2, 4), dtype=bool))), params, cache)
    assert str(raised.value).startswith("cache K_src axis -2 is 5, not T_x = 3: ")


# ---------------------------------------------------------------------------------------------
# The cache grows in place (NumPy's extend)

@pytest.mark.parametrize("arrays", BACKENDS)
def test_extend_appends_in_place_and_never_writes_over_a_state_still_held(arrays):
    """extend is concatenate along the axis: a first call copies into a buffer with room for
    half as many again, later calls write only the new entries after the last ones (a longer
    view of the same buffer); a state an earlier branch left behind is copied, so a view
    someone still holds never changes. On CuPy as on NumPy (its arrays' base, data.ptr and
    weak references), but CuPy's views cannot be made read-only."""
    extend = module(arrays, **DECODERS["seeds"]).rt.extend
    xp = arrays.xp
    rng = np.random.default_rng(0)
    past = arrays.put(rng.standard_normal((2, 3, 4, 5)))           # H B T d, T = 4

    def new(n=1):
        return arrays.put(rng.standard_normal((2, 3, n, 5)))

    def same(x, y):
        np.testing.assert_array_equal(to_numpy(x), to_numpy(y))

    a = new()
    one = extend(past, a, axis=-2)                                 # a buffer for 7 positions
    same(one, xp.concatenate([past, a], axis=-2))
    assert one.base is not None and one.base.shape == (2, 3, 7, 5)
    b = new()
    two = extend(one, b, axis=-2)                                  # in place: the same buffer
    assert two.base is one.base
    kept = two.copy()
    c = new()
    branch = extend(one, c, axis=-2)                               # from the older state: a copy
    assert branch.base is not one.base
    same(two, kept)                                                # two is untouched
    same(branch, xp.concatenate([past, a, c], axis=-2))
    d = new(2)
    full = extend(two, d, axis=-2)                                 # 8 > 7: a new buffer
    assert full.base is not one.base and full.base.shape == (2, 3, 12, 5)
    same(full, xp.concatenate([past, a, b, d], axis=-2))
    # not the start of a known buffer, or another dtype: concatenate's result
    same(extend(two[:, :, 1:], b, axis=-2), xp.concatenate([two[:, :, 1:], b], axis=-2))
    widened = extend(two, b.astype(np.float32), axis=-2)
    assert widened.dtype == np.float64 and widened.base is not one.base
    with pytest.raises(ValueError, match="dimensions except for the concatenation axis"):
        extend(two, new()[:, :2], axis=-2)
    with pytest.raises(np.exceptions.AxisError):
        extend(two, b, axis=4)
    # the same memory seen as another dtype is not the buffer's state
    as_integers = extend(two.view(np.int64), b.view(np.int64), axis=-2)
    same(as_integers, xp.concatenate([two.view(np.int64), b.view(np.int64)], axis=-2))
    same(two, kept)
    if arrays is NUMPY:     # the states share the buffer: a write into one is refused
        with pytest.raises(ValueError, match="read-only"):
            one[0, 0, 0, 0] = 1.0


@pytest.mark.parametrize("arrays", BACKENDS)
def test_two_continuations_of_one_cache_decode_as_each_alone(arrays):
    """A cache shared by two continuations (beam search, sampling twice from a prompt): each
    step's logits are those of decoding that continuation alone, whichever runs first."""
    choices = DECODERS["gpt2"]
    model = module(arrays, **choices)
    params = arrays.put(params_for(choices, np.float64))
    rng = np.random.default_rng(3)
    u, m = arrays.put((rng.integers(0, SIZES["V"], (2, 8)), np.ones((2, 8), dtype=bool)))
    x, y = arrays.put(tuple(rng.integers(0, SIZES["V"], (2, 2, 1))))

    def ones(length):
        return arrays.put(np.ones((2, length), dtype=bool))

    def nested_copy(cache):      # the cache's structure copied, its arrays shared
        if isinstance(cache, dict):
            return {key: nested_copy(value) for key, value in cache.items()}
        return [nested_copy(value) for value in cache] if isinstance(cache, list) else cache

    def alone(tokens):
        _, _, cache = model.prefill(u, m, params, H=2)
        outputs = []
        for token in tokens:
            logits, _ = model.decode_step(token, ones(9 + len(outputs)), params, cache)
            outputs.append(to_numpy(logits))
        return outputs

    _, _, cache = model.prefill(u, m, params, H=2)
    model.decode_step(x, ones(9), params, cache)
    snapshot = nested_copy(cache)                        # after x: both branches start here
    first = to_numpy(model.decode_step(y, ones(10), params, cache)[0])
    second = to_numpy(model.decode_step(x, ones(10), params, snapshot)[0])
    again = to_numpy(model.decode_step(x, ones(11), params, cache)[0])
    np.testing.assert_array_equal(first, alone([x, y])[1])
    np.testing.assert_array_equal(second, alone([x, x])[1])
    np.testing.assert_array_equal(again, alone([x, y, x])[2])


@pytest.mark.parametrize("arrays", BACKENDS)
def test_the_buffers_extend_keeps_are_forgotten_with_their_arrays(arrays):
    runtime = module(arrays, **DECODERS["seeds"]).rt
    before = len(runtime.GROWING)
    grown = runtime.extend(*arrays.put((np.zeros((2, 3, 4)), np.ones((2, 1, 4)))), axis=-2)
    assert len(runtime.GROWING) == before + 1
    del grown
    assert len(runtime.GROWING) == before


@pytest.mark.parametrize("arrays", BACKENDS)
def test_a_decoding_step_appends_to_the_cache_in_place(arrays):
    """decode_step's keys and values grow in their buffer (NumPy and CuPy alike): after the
    first step extends the prefill's cache into a buffer with room, the next steps write
    their positions into that same buffer, until it is full."""
    choices = DECODERS["llama"]
    model = module(arrays, **choices)
    params = arrays.put(params_for(choices, np.float64, H_kv=1))
    rng = np.random.default_rng(6)
    u = arrays.put(rng.integers(0, SIZES["V"], (2, 9)))
    m = arrays.put(np.ones((2, 9), dtype=bool))
    _, _, cache = model.prefill(u[:, :4], m[:, :4], params, H=2, H_kv=1)
    buffers = []
    for t in range(4, 9):
        model.decode_step(u[:, t:t + 1], m[:, :t + 1], params, cache, H=2)
        keys = cache["decoder"]["layers"][0]["self_attention"]["K_past"]
        assert keys.shape[-2] == t + 1
        buffers.append(keys.base)
    # 4 + 1 positions: a buffer for 5 + 2; the steps to 6 and 7 write into it; 8 needs another
    assert buffers[0] is buffers[1] is buffers[2] and buffers[3] is not buffers[0]
    assert buffers[0].shape[-2] == 7 and buffers[3] is buffers[4]


# ---------------------------------------------------------------------------------------------
# A step is atomic: it changes the cache only once every layer has its new entries

def cached_states(cache):
    """(layer, state) -> the array the cache holds there, for an identity comparison."""
    return {(i, name): array for i, layer in enumerate(cache["decoder"]["layers"])
            for name, array in layer["self_attention"].items()}


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, MemoryError])
@pytest.mark.parametrize("arrays", BACKENDS)
def test_a_step_interrupted_in_any_layer_leaves_the_cache_as_it_was(arrays, interruption,
                                                                   monkeypatch):
    """decode_step interrupted at any of its 2 N + 1 LayerNorms (each layer's two, the last
    after every layer has its new keys and values), by Ctrl-C or an error: every layer's cache
    is the arrays prefill made, and the same step run again gives the logits an uninterrupted
    step gives. (Before: layers 0 and 1 kept their new entries, layer 2 not.)"""
    choices = DECODERS["gpt2"]
    model = arrays.load(source(SPEC, choices, arrays.backend), private=True)
    params = arrays.put(params_for(choices, np.float64, N=3))
    u = arrays.put(np.random.default_rng(8).integers(0, SIZES["V"], (2, 6)))
    mask = arrays.put(np.ones((2, 6), dtype=bool))
    _, _, clean = model.prefill(u[:, :4], mask[:, :4], params, H=2)
    expected = to_numpy(model.decode_step(u[:, 4:6], mask, params, clean)[0])
    layer_norm = model.rt.layer_norm
    for stop in range(7):
        _, _, cache = model.prefill(u[:, :4], mask[:, :4], params, H=2)
        before = cached_states(cache)
        calls = []

        def interrupted(*args, calls=calls, stop=stop, **kwargs):
            calls.append(args)
            if len(calls) > stop:
                raise interruption()
            return layer_norm(*args, **kwargs)

        monkeypatch.setattr(model.rt, "layer_norm", interrupted)
        with pytest.raises(interruption):
            model.decode_step(u[:, 4:6], mask, params, cache)
        monkeypatch.setattr(model.rt, "layer_norm", layer_norm)
        assert len(calls) == stop + 1
        after = cached_states(cache)
        assert after.keys() == before.keys()
        assert all(after[key] is before[key] for key in before), stop
        logits = to_numpy(model.decode_step(u[:, 4:6], mask, params, cache)[0])
        np.testing.assert_allclose(logits, expected, rtol=1e-12, atol=1e-12)
        assert {array.shape[-2] for array in cached_states(cache).values()} == {6}


def test_a_decoding_step_without_a_dim_T_new_is_told_its_name():
    """The decoding step's dims are named T_past and T_new; a spec calling the new positions
    otherwise was told its axis 'takes neither none of' the full model's."""
    text = re.sub(r"\bT_new\b", "T_step", TINY)
    tail = ("the full model's B T d has as its positions, and the spec declares no dim "
            "T_new: a decoding step's new positions are T_new, after the T_past it keeps")
    assert decoding_findings(text) == [
        ("tiny.tspec:28", "decoding-mismatch",
         f"the decoding step takes X as B T_step d, whose axis 1 {tail}", None,
         "decoding=step"),
        ("tiny.tspec:30", "decoding-mismatch",
         f"the decoding step returns Y as B T_step d, whose axis 1 {tail}", None,
         "decoding=step")]


def test_a_state_in_a_spec_without_decoding_dims_is_one_finding():
    # its update of its own shape was reported too, "Y has T positions where S has T"
    spec = parse('spec s "s"\ndim B "b"\ndim T "t"\ndim d "d"\nblock f(X "B T d") -> Y:\n'
                 '    state S "B T d" "s" from Y\n    Y "B T d" "y" = X + S\n    update S = Y\n'
                 'input X "B T d" "x"\nZ "B T d" "z" = f(X) as one\noutput Z\n', "s.tspec")
    (finding,) = check(spec).findings
    assert (finding.line, finding.kind) == (6, "decoding-mismatch")
    assert finding.message.startswith("state S is kept where the model runs whole")
