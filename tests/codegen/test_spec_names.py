"""A spec's names never meet generated code's own: a spec that names a tensor, dim, block,
instance, parameter, input or state like a name generated code defines or takes as an
argument (a setting such as `eps` or `theta`, `params`, `cache`, `trace`, a helper's keyword,
`decode_step`, a block's `..._step` function, a constant) generates code that computes the
same numbers, to the last bit, as under the spec's own names."""

import functools
import inspect
import re
import symtable

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from support.arrays import keywords
from support.refusals import raises
from support.specs import TINY, builtin_line

from tspec import api
from tspec.codegen.generate import files, source, variant_source
from tspec.codegen.lowering.spelling import Spelling
from tspec.errors import SpecError, VariantError
from tspec.execution import weights
from tspec.execution.loading import load_source
from tspec.language.names import check_name
from tspec.language.parser import parse
from tspec.language.variant import Variant
from tspec.ops.catalogue import FUNCTIONS, OPS, SCALAR_FUNCTIONS, SETTINGS
from tspec.symbolic.expr import tokenize

SPEC_TEXT = api.BUILTIN_SPEC.read_text()
SIZES = {"d_model": 8, "H": 2, "H_kv": 1, "d_ff": 12, "N": 2, "V": 11, "max_len": 12}
MODELS = {
    "gpt2": {"arch": "decoder_only", "norm": "pre", "activation": "gelu_tanh",
             "positional": "learned", "attention_bias": "all", "output_embedding": "tied"},
    "llama": {"arch": "decoder_only", "norm": "pre", "activation": "swiglu",
              "positional": "rotary", "normalization": "rms_norm",
              "key_value_heads": "grouped", "feed_forward_bias": "none"},
}
# Names of the built-in spec, of each kind, that its decoder-only models use
RENAMED = ["H", "u", "m_tgt", "X_dec", "Y_0", "Y_dec", "logits", "probs", "Q", "K_h", "S", "A",
           "O", "K_past", "V_past", "Z", "M_self", "d_ff", "d_k", "T_dec", "W_1", "W_Q", "E",
           "gamma", "self_attention", "feed_forward", "layers", "decoder", "norm_1",
           "multi_head_attention", "decoder_layer", "normalize"]


@functools.cache
def generated_names() -> list[str]:
    """Every name a generated module of the built-in spec binds (its imports, constants,
    classes and functions; its functions' arguments and locals), every argument name of a
    runtime helper, and the settings: those a spec may name a thing (a plain identifier, no
    keyword or builtin, and not an op's, which the language keeps)."""
    names = set(SETTINGS)
    for path, text in files(("numpy",)).items():
        for table in _tables(symtable.symtable(text, path, "exec")):
            names |= {s.get_name() for s in table.get_symbols()
                      if s.is_assigned() or s.is_imported() or s.is_parameter()
                      or s.is_namespace()}
    names |= set(re.findall(r"\b([A-Za-z]\w*)=", files(("numpy",))["numpy/decoder_only.py"]))
    usable = set()
    for name in names:
        try:
            check_name(name, "tensor")
        except SpecError:
            continue
        usable.add(name)
    # the spec's own names, and the ops' and functions', which the language keeps for them
    language = {token.text for token in tokenize(SPEC_TEXT) if token.kind == "name"} | \
        set(OPS) | set(FUNCTIONS) | set(SCALAR_FUNCTIONS)
    return sorted(usable - language)


def _tables(table):
    yield table
    for child in table.get_children():
        yield from _tables(child)


def renamed(text: str, old: str, new: str) -> str:
    """The spec with the name ``old`` spelt ``new``: as a name, and as a word of a quoted
    shape (or description)."""
    lines = text.split("\n")
    edits = []
    for token in tokenize(text):
        if token.kind == "name" and token.text == old:
            edits.append((token.line, token.column, token.text, new))
        elif token.kind == "string" and re.search(rf"\b{old}\b", token.text):
            edits.append((token.line, token.column, token.text,
                          re.sub(rf"\b{old}\b", new, token.text)))
    for line, column, was, now in sorted(edits, reverse=True):
        start = column - 1
        assert lines[line - 1][start:start + len(was)] == was
        lines[line - 1] = lines[line - 1][:start] + now + lines[line - 1][start + len(was):]
    return "\n".join(lines)


def run(text: str, choices: dict, rename: dict[str, str]):
    """Logits of the model under ``choices`` over a prompt and two decoding steps, on seeded
    weights named as the spec ``text`` names them (``rename``: old name -> new)."""
    spec = parse(text, file="renamed.tspec")
    module = load_source(source(spec, choices), private=True)
    original = parse(SPEC_TEXT, file="transformer.tspec")
    shapes = weights.expected_shapes(original, choices, SIZES)
    flat = weights.flatten(weights.random_params(shapes, seed=3, dtype=np.float64))
    params = weights.nest({".".join(rename.get(part, part) for part in key.split(".")): value
                           for key, value in flat.items()})
    u = np.random.default_rng(4).integers(0, SIZES["V"], (2, 7))
    m = np.ones((2, 7), dtype=bool)
    m[1, 0] = False
    spelt = Spelling(spec)      # a keyword dim named like a setting is spelt otherwise
    dims = {spelt(rename.get(name, name)): SIZES[name] for name in ("H", "H_kv")}
    first, _, cache = module.prefill(u[:, :4], m[:, :4], params,
                                     **keywords(module.prefill, **dims))
    second, _ = module.decode_step(u[:, 4:5], m[:, :5], params, cache,
                                   **keywords(module.decode_step, **dims))
    third, _ = module.decode_step(u[:, 5:7], m, params, cache,
                                  **keywords(module.decode_step, **dims))
    return np.concatenate([first, second, third], axis=1)


# drawn from when a test first asks (generating the modules at collection cost every run)
NAMES = st.deferred(lambda: st.sampled_from(generated_names()))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, derandomize=True, phases=[Phase.explicit,
                                                                    Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@example(model="gpt2", old="X_dec", new="eps")         # the cases of issue 23
@example(model="llama", old="d_ff", new="eps")
@example(model="llama", old="Y_0", new="theta")
@example(model="llama", old="Z", new="DecodeStepParams")
@example(model="gpt2", old="layers", new="layer")
@example(model="gpt2", old="decoder_layer", new="prefill")
@example(model="llama", old="T_dec", new="i")
@example(model="llama", old="d_k", new="RULES")
@example(model="llama", old="H", new="eps")           # a keyword dim: spelt eps_
@example(model="gpt2", old="H", new="dtype")
@example(model="gpt2", old="transformer", new="decode_step")     # the spec's own name
@example(model="llama", old="feed_forward", new="decode_step")   # a block's
@example(model="llama", old="feed_forward", new="normalize_step")
@example(model="gpt2", old="logits", new="params")
@example(model="llama", old="Q", new="trace")
@example(model="llama", old="K_h", new="cache")
@given(model=st.sampled_from(sorted(MODELS)), old=st.sampled_from(RENAMED),
       new=NAMES)
def test_a_spec_named_like_generated_code_computes_the_same_numbers(model, old, new):
    choices = MODELS[model]
    expected = run(SPEC_TEXT, choices, {})
    got = run(renamed(SPEC_TEXT, old, new), choices, {old: new})
    np.testing.assert_array_equal(got, expected)


def test_the_names_drawn_include_the_settings_and_the_code_names():
    assert {"eps", "theta", "params", "cache", "trace", "decode_step", "prefill",
            "DecodeStepParams", "staged", "recorder", "MEMORY_LIMIT", "CACHE_STATES", "rt",
            "np"} <= set(generated_names())


SIZES_TO_SET = ["d_model=8", "H=2", "d_ff=12", "N=2", "V=11"]


@pytest.mark.slow
def test_tspec_run_passes_a_keyword_dim_spelt_otherwise_by_its_spec_name():
    """`tspec run` (api.run) of a spec whose head count is named `eps` (the LayerNorm
    epsilon's keyword) and whose decoder input is named `trace`: the same outputs, bit for
    bit, and the same tensors traced under the spec's names."""
    text = renamed(renamed(SPEC_TEXT, "H", "eps"), "X_dec", "trace")
    expected = api.run(parse(SPEC_TEXT, file="transformer.tspec"), SIZES_TO_SET)
    got = api.run(parse(text, file="renamed.tspec"),
                  [size.replace("H=", "eps=") for size in SIZES_TO_SET])
    assert got.sizes == {("eps" if name == "H" else name): size
                         for name, size in expected.sizes.items()}
    assert got.shapes == [(name.replace("X_dec", "trace"), shape)
                          for name, shape in expected.shapes]
    assert list(got.outputs) == list(expected.outputs)
    for name, value in expected.outputs.items():
        np.testing.assert_array_equal(got.outputs[name], value)


def test_the_module_spells_a_keyword_dim_otherwise_and_its_entry_check_knows_it():
    text = renamed(SPEC_TEXT, "H", "eps")
    module = load_source(source(parse(text, file="renamed.tspec"), MODELS["llama"]),
                         private=True)
    keywords = inspect.signature(module.decode_step).parameters
    assert [(name, p.default) for name, p in keywords.items() if p.kind is p.KEYWORD_ONLY] == [
        ("eps_", inspect.Parameter.empty), ("eps", 1e-05), ("rope_factor", 1.0),
        ("rope_low", 1.0), ("rope_high", 4.0), ("rope_context", 8192.0), ("theta", 10000.0),
        ("trace", None)]
    assert module.RULES["spelled"] == {"eps_": "eps"}
    shapes = weights.expected_shapes(parse(SPEC_TEXT, file="transformer.tspec"),
                                     MODELS["llama"], SIZES)
    params = weights.random_params(shapes, seed=3, dtype=np.float64)
    u, m = np.zeros((2, 4), dtype=np.int64), np.ones((2, 4), dtype=bool)
    with raises(ValueError, "transformer: the arguments break `require d_model % eps == 0` "
                            f"(d_model=8, eps=3; renamed.tspec:"
                            f"{builtin_line('require d_model % H == 0')})"):
        module.prefill(u, m, params, eps_=3, H_kv=1)


# TINY (tests/support/specs.py) with a block, attend, whose decoding step differs: its step's
# function is attend_step, and the model's second output is named so.
STEPPED = TINY.replace(
    '    Y "B T_x d" "output" = K + X\n\nblock attend_cached',
    '    when decoding == step:\n        Y "B T_x d" "output" = K - X\n'
    '    else:\n        Y "B T_x d" "output" = K + X\n\nblock attend_cached').replace(
    '    Y "B T d" "output" = attend(X) as first\n',
    '    Y "B T d" "output" = attend(X) as first\n'
    '    Z "B T d" "second" = attend(Y) as second\n').replace(
    '    Y "B T_new d" "output at the new positions" = attend_cached(X) as first\n',
    '    Y "B T_new d" "output at the new positions" = attend_cached(X) as first\n'
    '    Z "B T_new d" "second" = attend(Y) as second\n').replace("output Y\n", "output Z\n")


@pytest.mark.parametrize("new", ["attend_step", "decode_step", "prefill", "AttendStepParams",
                                 "cache", "staged"])
def test_a_tensor_named_like_a_step_function_computes_the_same_numbers(new):
    assert STEPPED.count("attend(Y) as second") == 2
    rng = np.random.default_rng(5)
    params = {"first": {"W": rng.standard_normal((3, 3))},
              "second": {"W": rng.standard_normal((3, 3))}}
    X = rng.standard_normal((2, 6, 3))
    outputs = []
    for text in (STEPPED, renamed(STEPPED, "Z", new)):
        module = load_source(source(parse(text, file="stepped.tspec"), {}), private=True)
        assert "attend_step" in dir(module)
        first, cache = module.prefill(X[:, :4], params)
        step = module.decode_step(X[:, 4:], params, cache)
        outputs.append((first, step))
    for expected, got in zip(*outputs):
        np.testing.assert_array_equal(got, expected)


def test_a_variants_dim_named_like_a_setting_is_the_default_of_its_own_keyword():
    """`tspec generate` of a variant whose head count is named eps, with eps the setting in
    [settings]: each value the default of its own keyword (they once shared one name)."""
    spec = parse(renamed(SPEC_TEXT, "H", "eps"), file="renamed.tspec")
    variant = Variant("renamed", spec, {"d_model": 8, "eps": 2, "H_kv": 1, "d_ff": 12,
                                        "N": 2, "V": 11},
                      dict(MODELS["llama"]), settings={"eps": 1e-6})
    module = load_source(variant_source(variant, "numpy"), private=True)
    keywords = inspect.signature(module.decode_step).parameters
    assert (keywords["eps_"].default, keywords["eps"].default) == (2, 1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("old, new", [("u", "i"), ("m_tgt", "dtype"), ("u", "cache")])
def test_tspec_run_decodes_a_spec_whose_input_is_named_like_code(old, new):
    """`tspec run --decode` passed the decoding step its inputs by their code names (a
    KeyError, 'i_', where an input was named i)."""
    sizes = [*SIZES_TO_SET, "arch=decoder_only"]
    expected = api.decode(parse(SPEC_TEXT, file="transformer.tspec"), 2, sizes)
    got = api.decode(parse(renamed(SPEC_TEXT, old, new), file="renamed.tspec"), 2, sizes)
    assert (got.prompt, got.steps, got.cache, got.difference, got.scale) == (
        expected.prompt, expected.steps, expected.cache, expected.difference, expected.scale)


def test_set_of_a_dim_named_like_a_setting_says_where_the_setting_is_set():
    spec = parse(renamed(SPEC_TEXT, "H", "eps"), file="renamed.tspec")
    variant = Variant("renamed", spec)
    assert variant.with_settings(["eps=4"]).dims == {"eps": 4}
    with raises(VariantError, "--set eps=1e-6: dim values are positive integers, got '1e-6': "
                              "eps is a dim of this spec, which --set sets; set the setting "
                              "eps in a variant's [settings]"):
        variant.with_settings(["eps=1e-6"])
