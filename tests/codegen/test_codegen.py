"""Code generation: determinism, the generated text's contract, numerics and bad input."""

import ast
import builtins
import functools
import inspect
import math
import re
import subprocess
import symtable
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.special
from hypothesis import HealthCheck, example, given, settings
from support import reference_numpy
from support.compare import assert_close
from support.refusals import raises
from support.specs import settings_for
from support.strategies import variants

from tspec import api, cli, codegen
from tspec.checking.check import check
from tspec.codegen import generate, ir
from tspec.codegen.backends import backend
from tspec.codegen.generate import source
from tspec.codegen.lowering.lower import lower
from tspec.codegen.lowering.spelling import CODE_NAMES
from tspec.errors import CodegenError, SpecError, UsageError
from tspec.execution import weights
from tspec.execution.loading import load_module, load_source
from tspec.language.model import BlockCall, Equation, TensorDecl, When, outputs, step_function
from tspec.language.parser import parse
from tspec.ops.catalogue import SETTINGS
from tspec.symbolic.shape import Shape

SPEC = api.read_spec(api.BUILTIN_SPEC)
GENERATED = api.checkout() / "generated"


@functools.cache
def generated(typecheck=False, **choices):
    return load_source(source(SPEC, choices), typecheck=typecheck)


def small_params(choices, dtype=np.float32, seed=0, **dims):
    sizes = {"d_model": 8, "H": 2, "d_ff": 12, "N": 2, "V": 11, "max_len": 8, **dims}
    return weights.random_params(weights.expected_shapes(SPEC, choices, sizes), seed, dtype)


def encoder_decoder_inputs(B=2, T=5, T_dec=4, V=11, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, V, (B, T)), np.ones((B, T), dtype=bool),
            rng.integers(0, V, (B, T_dec)), np.ones((B, T_dec), dtype=bool))


# ---------------------------------------------------------------------------------------------
# The files

def test_generated_files_are_current():
    diff = generate.stale(GENERATED)
    assert diff == "", f"generated/ is stale; run `tspec generate`:\n{diff}"


def test_regeneration_is_byte_identical_and_names_the_spec_and_its_hash():
    first, second = generate.files(), generate.files()
    assert first == second
    assert sorted(first) == [f"{backend}/{name}.py" for backend in ("cupy", "numpy")
                             for name in ("__init__", "_runtime", "bert", "decoder_only",
                                          "encoder_decoder", "encoder_only", "llama")]
    text = first["numpy/encoder_decoder.py"]
    assert f"spec/transformer.tspec (sha256 {SPEC.text_hash[:16]})" in text
    assert "2026" not in text and "0.1.0" not in text        # no dates, no versions


def test_the_generated_module_reads_like_the_spec():
    text = (GENERATED / "numpy" / "encoder_decoder.py").read_text(encoding="utf-8")
    runtime = (GENERATED / "numpy" / "_runtime.py").read_text(encoding="utf-8")
    for name in ("scaled_dot_product_attention", "multi_head_attention", "add_and_layer_norm",
                 "feed_forward", "encoder_layer", "decoder_layer", "encoder", "decoder",
                 "transformer"):
        assert f"\ndef {name}(" in text, name
    for name in ("embed", "positional_encoding", "split_heads"):        # ops: the runtime's
        assert f"\ndef {name}(" in runtime and f" = rt.{name}(" in text, name
    assert (                    # attention's three equations, and its strategy without a trace
        "    d_k = Q_h.shape[-1]\n"
        "    if trace is None:  # the equations below, a block of query rows at a time\n"
        "        return rt.attend_in_blocks(Q_h / math.sqrt(d_k), K_h, V_h, L_h)  # [H] B T_q d_v\n"
        "    S_h = Q_h / math.sqrt(d_k) @ K_h.swapaxes(-1, -2) + L_h  # [H] B T_q T_kv\n"
        "    rt.keep_masked(S_h, L_h)  # float16: a score past its range is +inf; masked keys "
        "stay -inf\n"
        "    A_h = rt.softmax(S_h)  # [H] B T_q T_kv\n"
        "    O_h = A_h @ V_h  # [H] B T_q d_v\n"
    ) in text
    assert "        S_h = Q_h @ K_h.T / sqrt(d_k) + L_h\n" in text          # plain equation
    assert "\\frac" not in text and 'r"""' not in text   # one form: LaTeX is the docs pages'
    assert '    Q_proj = rt.project(X_q, params["W_Q"])  # B T_q H*d_k\n' in text
    assert 'W_Q: Float[np.ndarray, "d_model H*d_k"]' in text
    assert "scipy" not in text               # exact GELU is not used by these choices


def test_every_step_of_every_function_carries_its_shape():
    """Every step that makes a tensor carries the spec's shape of it, which its comment
    shows; the steps that make none are the trace's record, the return, the float16 patch
    and the decoding step's commit of its cache, whose comment says what it does."""
    def shape_of(step):
        if isinstance(step, (ir.Assign, ir.CallBlock)):
            return step.comment.shape
        return step.shape

    for choices in generate.BUILTIN_MODELS.values():
        module = lower(SPEC, choices, backend("numpy"))
        for function in module.functions:
            for step in function.steps:
                inner = step.steps if isinstance(step, ir.AttentionCore) else (step,)
                for each in inner:
                    if isinstance(each, (ir.Record, ir.Return, ir.KeepMasked)):
                        continue
                    if isinstance(each, ir.Evaluate) and function.name == "decode_step":
                        assert each.comment.after == "every layer's new entries at once"
                        continue
                    if function.name == "prefill":      # the full forward's call
                        continue
                    assert isinstance(shape_of(each), Shape), (function.name, each)


def test_the_cupy_backend_renders_from_the_same_templates():
    text = source(SPEC, {"activation": "gelu"}, "cupy")
    assert "import cupy as cp\n" in text
    assert "np." not in text and "numpy" not in text.split('"""', 2)[2]
    assert 'Float[cp.ndarray, "B T_q d_model"]' in text
    assert (
        "    if trace is None:  # the equations below, the scores and weights in one kernel\n"
        "        return rt.attend_fused(Q_h / math.sqrt(d_k), K_h, V_h, L_h)  # [H] B T_q d_v\n"
        "    S_h = rt.batched_matmul(Q_h / math.sqrt(d_k), K_h.swapaxes(-1, -2)) + L_h"
        "  # [H] B T_q T_kv\n"
        "    rt.keep_masked(S_h, L_h)  # float16: a score past its range is +inf; masked keys "
        "stay -inf\n"
        "    A_h = rt.softmax(S_h)  # [H] B T_q T_kv\n"
        "    O_h = rt.batched_matmul(A_h, V_h)  # [H] B T_q d_v\n"
    ) in text
    runtime = generate.runtime_source("cupy")
    assert "GELU_KERNEL = cp.ElementwiseKernel(" in runtime and "erf(" in runtime
    assert "cupyx" not in runtime            # the exact GELU is a kernel of its own


def _definitions(text: str) -> dict[str, str]:
    """A module's top-level definitions: name -> source text."""
    tree = ast.parse(text)
    out = {}
    for node in tree.body:
        names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else \
            [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        for name in names:
            out[name] = ast.get_source_segment(text, node)
    return out


@pytest.mark.parametrize("arch", ["encoder_decoder", "encoder_only", "decoder_only"])
@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
def test_the_numpy_and_cupy_trees_differ_only_where_the_backend_table_says(arch, activation):
    """With the table's strings swapped (module, alias, array type, description, memory), a
    definition of a model or its runtime differs between the two backends only if it is a
    helper one backend replaces (or a name its replacement template defines), the attention
    strategy's (attend_in_blocks for NumPy), the function holding the attention core, or one
    where a residual sum is added in the norm's kernel (fused_residual)."""
    numpy_backend, cupy_backend = backend("numpy"), backend("cupy")
    choices = {"arch": arch, "activation": activation}
    definitions = {}
    for row in (numpy_backend, cupy_backend):
        definitions[row.name] = {}
        texts = source(SPEC, choices, row.name), generate.runtime_source(row.name)
        for name, text in _definitions(texts[0]).items() | _definitions(texts[1]).items():
            for field in ("description", "array_type", "module", "memory_owner"):
                text = text.replace(getattr(row, field), f"<{field}>")
            text = text.replace("\n    ".join(row.memory_total), "<memory_total>")
            text = re.sub(rf"\b{row.alias}\.", "<alias>.", text)
            text = re.sub(r'^VERSION = "\w+"', 'VERSION = "<its hash>"', text)
            # a state a decoding step extends: appended to in place (growing_states) or copied;
            # the buffer's room for half as many again counted in the memory estimate
            text = re.sub(r"\brt\.extend\((.+?), (.+?), axis=(-?\d+)\)",
                          r"<alias>.concatenate([\1, \2], axis=\3)", text)
            definitions[row.name][name] = re.sub(
                r"require_memory\(\n.*?\n    \)\n|require_memory\([^\n]*\)\n",
                lambda call: "".join(call[0].replace("(3/2)*", "").split()).replace(",)", ")"),
                text, flags=re.DOTALL)
    numpy_defs, cupy_defs = definitions["numpy"], definitions["cupy"]
    replaced = set(cupy_backend.helpers) | set(numpy_backend.helpers)
    # templates the table decides: a backend's own, one that branches on a table field
    # (thread_pool, float32_gelu), the attention strategy's (attend_in_blocks, over
    # query_blocks), the thread pool's workspace (only its helpers use it), growing states
    # (extend), float16's rounding and the residual sum (only the shared softmax and norms,
    # which CuPy replaces, use them there)
    folder = Path(codegen.__file__).parent / "templates" / "helpers"
    decided = [path.read_text(encoding="utf-8") for path in folder.rglob("*.py.j2")
               if path.parent.name == "cupy"
               or path.name in ("attend_in_blocks.py.j2", "query_blocks.py.j2",
                                "workspace.py.j2", "extend.py.j2", "float16.py.j2",
                                "residual_sum.py.j2")
               or "{% if backend." in path.read_text(encoding="utf-8")]
    templates = "".join(decided)
    branching = {path.name.removesuffix(".py.j2") for path in folder.glob("*.py.j2")
                 if "{% if backend." in path.read_text(encoding="utf-8")}
    strategy = {"scaled_dot_product_attention"}
    # where the backend fuses a residual sum into the norm that reads it (fused_residual)
    fused = {name for name, text in cupy_defs.items() if "residual=" in text} \
        if cupy_backend.fused_residual else set()
    differing = {name for name in numpy_defs.keys() | cupy_defs.keys()
                 if numpy_defs.get(name) != cupy_defs.get(name)}
    assert differing, "the backends render the same text"
    for name in differing:
        assert name in replaced or name in branching or name in strategy or name in fused or \
            re.search(rf"^(def {name}\(|{name} = |class {name}\b)", templates, re.MULTILINE), name
    same = numpy_defs.keys() & cupy_defs.keys() - differing
    layer = "decoder_layer" if arch == "decoder_only" else "encoder_layer"
    assert {"embed", "split_heads", "multi_head_attention", layer} <= same


def test_generate_check_on_a_stale_directory_exits_1_with_a_diff(tmp_path, capsys):
    assert cli.main(["generate", "--out", str(tmp_path)]) == 0
    assert cli.main(["generate", "--check", "--out", str(tmp_path)]) == 0
    path = tmp_path / "numpy" / "encoder_only.py"
    path.write_text(path.read_text(encoding="utf-8").replace("softmax", "softmin", 1),
                    encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["generate", "--check", "--out", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert f"--- {path}\n+++ generated\n" in out and "-" in out
    assert err == (f"tspec: generated code in {tmp_path} is stale; run `tspec generate`\n")


def test_unknown_backend_is_a_usage_error(capsys):
    assert cli.main(["generate", "--backend", "jax"]) == 2
    assert capsys.readouterr().err == "tspec: error: unknown backend 'jax'; backends: numpy, cupy\n"


def test_lowering_refuses_a_spec_that_is_not_proved():
    wrong = parse('dim B "b"\ndim d "d"\ndim e "e"\ninput X "B d"\nparam W "e d"\n'
                  'Y "B d" = X @ W\noutput Y\n', file="w.tspec")
    with pytest.raises(CodegenError, match=r"^w.tspec: spec w is not proved under the spec as "
                                           r"written: 1 finding\(s\); run `tspec check`$"):
        lower(wrong, {}, backend("numpy"))


# ---------------------------------------------------------------------------------------------
# Numerics and dtypes

@pytest.mark.parametrize("arch", ["encoder_decoder", "encoder_only", "decoder_only"])
def test_committed_modules_run_and_keep_float32(arch):
    module = load_module(GENERATED / "numpy" / f"{arch}.py")
    choices = {"arch": arch}
    params = small_params(choices)
    t, m, u, m_dec = encoder_decoder_inputs()
    inputs = {"encoder_decoder": (t, m, u, m_dec), "encoder_only": (t, m),
              "decoder_only": (u, m_dec)}[arch]
    trace = {}
    logits, probs = module.transformer(*inputs, params, H=2, trace=trace)
    floats = {k: v for k, v in weights.flatten(trace).items() if v.dtype != bool}
    assert {str(v.dtype) for v in floats.values()} == {"float32"}, \
        {k: v.dtype for k, v in floats.items() if v.dtype != np.float32}
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-6)
    assert logits.dtype == np.float32


BERT = generate.BUILTIN_MODELS["bert"]


def bert_inputs(B=3, T=5, V=11, V_type=2, seed=0):
    """Token ids, a key mask with padding at the end of the last sequence, token types."""
    rng = np.random.default_rng(seed)
    keep = np.ones((B, T), dtype=bool)
    keep[-1, T - 2:] = False
    return rng.integers(0, V, (B, T)), keep, rng.integers(0, V_type, (B, T))


def test_committed_bert_module_runs_and_keeps_float32():
    module = load_module(GENERATED / "numpy" / "bert.py")
    params = small_params(BERT, V_type=2)
    trace = {}
    Z_enc, C = module.transformer(*bert_inputs(), params, H=2, eps=1e-12, trace=trace)
    assert Z_enc.shape == (3, 5, 8) and C.shape == (3, 8)
    floats = {k: v for k, v in weights.flatten(trace).items() if v.dtype != bool}
    assert {str(v.dtype) for v in floats.values()} == {"float32"}
    assert np.abs(C).max() < 1                       # tanh
    np.testing.assert_array_equal(trace["Z_cls"], Z_enc[:, 0])


@pytest.mark.parametrize("choices", [
    {"positional": "learned", "norm": "post"},
    {"positional": "sinusoidal", "norm": "pre"},
    {"positional": "relative", "norm": "post", "head_dims": "free"},
])
def test_bert_under_other_choices_matches_the_plain_reference(choices):
    """encoder_io=bert under positions and norms BERT does not use, against the independent
    loop-per-head implementation (Hugging Face covers BERT's own choices)."""
    chosen = {**BERT, **choices}
    dims = {"d_k": 3, "d_v": 5} if choices.get("head_dims") == "free" else {}
    params = small_params(chosen, np.float64, seed=3, V_type=3, **dims)
    inputs = bert_inputs(V_type=3, seed=3)
    module = generated(**chosen)
    # H is a keyword unless an array reveals it (a relative bias table per head does)
    heads = {"H": 2} if "H" in inspect.signature(module.transformer).parameters else {}
    Z_enc, C = module.transformer(*inputs, params, **heads)
    expected = reference_numpy.forward(SPEC.choice_values(chosen), params, inputs, 2,
                                       dims.get("d_k", 4), dims.get("d_v", 4))
    assert_close({"Z_enc": Z_enc, "C": C}, expected, "float64")


def test_token_types_out_of_range_name_their_table():
    t, keep, s = bert_inputs()
    s[0, 2] = 2
    with pytest.raises(ValueError, match=r"^s: id 2 at index \(0, 2\) is out of range: ids index "
                                         r"the 2 rows of E_type \(0\.\.1\)$"):
        generated(**BERT).transformer(t, keep, s, small_params(BERT, V_type=2), H=2)


def test_a_fully_masked_row_gives_zero_weights_not_nan():
    module = generated(arch="encoder_only")
    t, keep, _, _ = encoder_decoder_inputs()
    keep[1] = False                      # every key of the second sequence is padding
    trace = {}
    logits, _probs = module.transformer(t, keep, small_params({"arch": "encoder_only"}), H=2,
                                       trace=trace)
    weights_row = trace["encoder"]["layers"][0]["Z_out"]
    assert np.isfinite(logits).all() and np.isfinite(weights_row).all()
    A_h = trace["encoder"]["layers"][0]["self_attention"]["attention"]["A_h"]
    assert (A_h[:, 1] == 0).all() and np.allclose(A_h[:, 0].sum(-1), 1)


def sinusoidal_loop(T, d, offset=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) for
    pos = offset .. offset + T - 1, entry by entry in float64 (an odd d ends with a sin)."""
    P = np.empty((T, d))
    for row, pos in enumerate(range(offset, offset + T)):
        for column in range(d):
            angle = pos / 10000 ** (2 * (column // 2) / d)
            P[row, column] = math.sin(angle) if column % 2 == 0 else math.cos(angle)
    return P


@pytest.mark.parametrize("T, d, offset", [(7, 6, 0), (7, 7, 0), (4, 1, 0), (3, 2, 0),
                                          (5, 9, 4), (2, 8, 11), (1, 3, 30)])
def test_positional_encoding_is_the_seeds_formula_for_odd_and_even_widths(T, d, offset):
    table = generated().rt.positional_encoding
    np.testing.assert_allclose(table(T, d, np.float64, offset=offset),
                               sinusoidal_loop(T, d, offset), rtol=0, atol=1e-15)
    P32 = table(T, d, np.float32, offset=offset)
    assert P32.dtype == np.float32 and P32.shape == (T, d)


def test_exact_and_tanh_gelu_against_the_normal_cdf():
    exact = generated(activation="gelu").rt.gelu
    approximate = generated(activation="gelu_tanh").rt.gelu_tanh
    x = np.linspace(-6, 6, 101)
    cdf = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(exact(x), x * cdf, atol=1e-15)
    np.testing.assert_allclose(approximate(x), x * cdf, atol=1e-3)     # an approximation
    assert exact(x.astype(np.float32)).dtype == approximate(x.astype(np.float32)).dtype \
        == np.float32


def test_relative_position_bias_indexes_the_centred_table():
    module = generated(positional="relative")
    R = np.arange(2 * 4 - 1, dtype=np.float64)[None]          # offsets -3..3 at 0..6
    assert module.rt.relative_position_bias(R, 4, 4).tolist() == [
        [[3, 4, 5, 6], [2, 3, 4, 5], [1, 2, 3, 4], [0, 1, 2, 3]]]
    # bottom-right aligned: the 3 queries are positions 1..3 of the 4 keys
    assert module.rt.relative_position_bias(R, 3, 4).tolist() == [
        [[2, 3, 4, 5], [1, 2, 3, 4], [0, 1, 2, 3]]]


# ---------------------------------------------------------------------------------------------
# Positions after T_past decoded ones (a decoding step): the helpers against formulas written
# here, in float64, and each against the last rows of its whole-sequence form

STEPS = [(0, 1), (0, 5), (1, 1), (3, 1), (4, 3), (7, 2)]      # (T_past, T_new)


def rotary_formula(X, offset, theta=10000.0):
    """RoPE by its definition: position p = offset + row turns (x_i, x_{i + d/2}) by
    p * theta^(-2i/d)."""
    T, d = X.shape[-2:]
    out = np.empty_like(X)
    for row in range(T):
        for i in range(d // 2):
            angle = (offset + row) * theta ** (-2 * i / d)
            c, s = math.cos(angle), math.sin(angle)
            x, y = X[..., row, i], X[..., row, i + d // 2]
            out[..., row, i] = x * c - y * s
            out[..., row, i + d // 2] = y * c + x * s
    return out


@pytest.mark.parametrize("T_past, T_new", STEPS)
def test_rotary_with_an_offset_is_the_last_rows_of_the_whole_sequence(T_past, T_new):
    rotary = generated(positional="rotary").rt.rotary
    X_full = np.random.default_rng(T_past).standard_normal((2, 3, T_past + T_new, 6))
    X_new = X_full[..., T_past:, :]
    turned = rotary(X_new, 10000.0, offset=T_past)
    np.testing.assert_allclose(turned, rotary(X_full, 10000.0)[..., T_past:, :], rtol=0,
                               atol=1e-14)
    np.testing.assert_allclose(turned, rotary_formula(X_new, T_past), rtol=0, atol=1e-14)
    np.testing.assert_array_equal(rotary(X_new, 500.0), rotary(X_new, 500.0, offset=0))


@pytest.mark.parametrize("T_past, T_new", STEPS)
def test_sinusoidal_encoding_with_an_offset_is_the_last_rows_of_the_longer_table(T_past, T_new):
    table = generated().rt.positional_encoding
    P = table(T_new, 6, np.float64, offset=T_past)
    expected = np.array([[math.sin(pos / 10000 ** (2 * (k // 2) / 6)) if k % 2 == 0 else
                          math.cos(pos / 10000 ** (2 * (k // 2) / 6)) for k in range(6)]
                         for pos in range(T_past, T_past + T_new)])
    np.testing.assert_allclose(P, expected, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(P, table(T_past + T_new, 6, np.float64)[T_past:])


@pytest.mark.parametrize("T_past, T_new", STEPS)
def test_causal_mask_is_the_last_rows_of_the_square_mask(T_past, T_new):
    causal_mask = generated().rt.causal_mask
    T_kv = T_past + T_new
    M = causal_mask(T_new, T_kv)
    expected = np.array([[j <= i + (T_kv - T_new) for j in range(T_kv)] for i in range(T_new)])
    np.testing.assert_array_equal(M, expected.reshape(T_new, T_kv))
    np.testing.assert_array_equal(M, causal_mask(T_kv, T_kv)[T_kv - T_new:])
    assert M.dtype == bool and M[-1].all()          # the newest position sees every key


@pytest.mark.parametrize("T_past, T_new", STEPS)
def test_relative_position_bias_is_the_last_rows_of_the_square_bias(T_past, T_new):
    bias = generated(positional="relative").rt.relative_position_bias
    T_kv = T_past + T_new
    R = np.random.default_rng(T_kv).standard_normal((2, 2 * T_kv + 1))    # longer than needed
    centre = (R.shape[-1] - 1) // 2
    P = bias(R, T_new, T_kv)
    expected = np.array([[R[:, (j - i - (T_kv - T_new)) + centre] for j in range(T_kv)]
                         for i in range(T_new)]).transpose(2, 0, 1)
    np.testing.assert_array_equal(P, expected.reshape(2, T_new, T_kv))
    np.testing.assert_array_equal(P, bias(R, T_kv, T_kv)[:, T_kv - T_new:])


def test_a_decoding_step_spec_generates_offsets_and_row_ranges():
    text = ('dim B "batch"\ndim T_past "positions decoded"\ndim T "new positions"\n'
            'dim d "width"\ndim max_len "positions the table covers"\ndim H "heads"\n'
            'require T_past + T <= max_len\nrequire d % 2 == 0\n'
            'input X "B T d"\nparam P_table "max_len d"\nparam P_h[H] "max_len d"\n'
            'P "T d" = P_table[T_past:T_past + T]\n'
            'P_new_h[H] "T d" = P_h[T_past:T_past + T]\n'
            'Q "B T d" = rotary(X + P, T_past)\n'
            'S "T d" = sinusoidal_encoding(T, d, T_past)\n'
            'M "T T_past+T" bool = causal_mask(T, T_past + T)\n'
            'output Q, S, M, P_new_h\n')
    code = source(parse(text, file="step.tspec"), {})
    for line in ('    P = rt.table_rows(params["P_table"], "P_table", T_past, T + T_past)  # T d\n',
                 ('    P_new_h = rt.table_rows(params["P_h"], "P_h", T_past, T + T_past, axis=1)'
                  '  # [H] T d\n'),
                 ('    Q = rt.rotary(\n        X + P,\n        settings.theta,\n        '
                  '[settings.rope_factor, settings.rope_low, settings.rope_high, '
                  'settings.rope_context],\n        offset=T_past,\n    )  # B T d\n'),
                 '    S = rt.positional_encoding(T, d, X.dtype, offset=T_past)  # T d\n',
                 '    M = rt.causal_mask(T, T + T_past)  # T T+T_past\n'):
        assert line in code, line
    module = load_source(code)
    rng = np.random.default_rng(0)
    B, T_past, T, d, max_len, H = 2, 3, 2, 4, 6, 3
    X = rng.standard_normal((B, T, d))
    table, tables = rng.standard_normal((max_len, d)), rng.standard_normal((H, max_len, d))
    trace = {}
    Q, S, M, P_new = module.step(X, {"P_table": table, "P_h": tables}, T_past=T_past,
                                 trace=trace)
    np.testing.assert_array_equal(trace["P"], table[T_past:T_past + T])
    np.testing.assert_array_equal(P_new, tables[:, T_past:T_past + T])
    np.testing.assert_allclose(Q, rotary_formula(X + table[T_past:T_past + T], T_past),
                               rtol=0, atol=1e-14)
    np.testing.assert_array_equal(S, module.rt.positional_encoding(T_past + T, d,
                                                                   X.dtype)[T_past:])
    np.testing.assert_array_equal(M, np.tri(T_past + T, dtype=bool)[T_past:])


# ---------------------------------------------------------------------------------------------
# Bad input at run time

def test_token_ids_out_of_range_are_named():
    module = generated(arch="encoder_only")
    t, keep, _, _ = encoder_decoder_inputs()
    t[1, 3] = 11
    with pytest.raises(ValueError, match=r"^t: id 11 at index \(1, 3\) is out of range: ids "
                                         r"index the 11 rows of E \(0\.\.10\)$"):
        module.transformer(t, keep, small_params({"arch": "encoder_only"}), H=2)


def test_token_ids_of_a_float_dtype_are_refused():
    """By the entry function's check (rt.entry); the embedding's own check (rt.embed) says
    the same of a block's function called directly."""
    module = generated(arch="encoder_only")
    t, keep, _, _ = encoder_decoder_inputs()
    params = small_params({"arch": "encoder_only"})
    with pytest.raises(ValueError, match=r"^transformer: t is float64, not an integer dtype$"):
        module.transformer(t.astype(float), keep, params, H=2)
    with pytest.raises(TypeError, match=r"^t: ids into E must be integers, got dtype float64$"):
        module.rt.embed(params["E"], t.astype(float), ids="t")


def test_a_mask_that_is_not_boolean_is_refused():
    module = generated(arch="encoder_only")
    t, keep, _, _ = encoder_decoder_inputs()
    with pytest.raises(ValueError, match=r"^transformer: m_src is int64, not a boolean dtype$"):
        module.transformer(t, keep.astype(np.int64), small_params({"arch": "encoder_only"}),
                           H=2)
    with pytest.raises(TypeError, match=r"^a key mask must be boolean \(True = token\), got "
                                         r"dtype int64$"):
        module.rt.padding_mask(keep.astype(np.int64), 5)


@pytest.mark.parametrize("typecheck", [False, True])
def test_wrong_shapes_at_the_entry_are_refused_whatever_typecheck_says(typecheck):
    module = generated(typecheck, arch="encoder_only")
    t, keep, _, _ = encoder_decoder_inputs()
    with pytest.raises(ValueError, match=r"^transformer: m_src axis 1 is 4, but T is 5 \(from t "
                                         r"axis 1\)$"):
        module.transformer(t, keep[:, :4], small_params({"arch": "encoder_only"}), H=2)


def test_wrong_shapes_fail_under_typecheck_with_jaxtyping_naming_the_axes():
    """A block's function called directly: jaxtyping checks it under TSPEC_TYPECHECK=1."""
    module = generated(True, arch="encoder_only")
    params = small_params({"arch": "encoder_only"})
    layer = params["encoder"]["layers"][0]["feed_forward"]
    X = np.zeros((2, 5, 7), np.float32)                 # d_model is 8
    with pytest.raises(Exception, match=r"k=7") as error:      # rt.project: X @ W
        module.feed_forward(X, layer)
    assert type(error.value).__name__ in ("TypeCheckError", "BeartypeCallHintParamViolation") \
        or "jaxtyping" in type(error.value).__module__ or "beartype" in \
        type(error.value).__module__


def test_without_typecheck_the_functions_are_not_wrapped():
    """Without TSPEC_TYPECHECK, a block's function is the plain function and the entry
    function the entry check around it; with it, jaxtyping wraps both."""
    plain = generated(arch="encoder_only")
    checked = generated(True, arch="encoder_only")
    assert not hasattr(plain.feed_forward, "__wrapped__")
    assert hasattr(checked.feed_forward, "__wrapped__")
    assert not hasattr(plain.transformer.__wrapped__, "__wrapped__")
    assert hasattr(checked.transformer.__wrapped__, "__wrapped__")


# ---------------------------------------------------------------------------------------------
# Weights

@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_weights_round_trip_through_files(tmp_path, suffix):
    choices = {"arch": "encoder_only"}
    shapes = weights.expected_shapes(SPEC, choices, {"d_model": 8, "H": 2, "d_ff": 12, "N": 2,
                                                     "V": 11})
    params = weights.random_params(shapes, 3)
    path = tmp_path / f"w{suffix}"
    weights.save(path, params)
    loaded = weights.load(path, shapes)
    assert weights.flatten(loaded).keys() == weights.flatten(params).keys()
    for name, value in weights.flatten(params).items():
        np.testing.assert_array_equal(weights.flatten(loaded)[name], value)


def test_a_weight_of_the_wrong_shape_is_named(tmp_path):
    shapes = {"E": (11, 8), "encoder.layers.0.self_attention.W_Q": (8, 8)}
    path = tmp_path / "w.npz"
    np.savez(path, **{"E": np.zeros((11, 8), np.float32),
                      "encoder.layers.0.self_attention.W_Q": np.zeros((8, 4), np.float32)})
    with pytest.raises(weights.WeightsError, match=(
            rf"^{path}: parameter encoder.layers.0.self_attention.W_Q has shape \(8, 4\); "
            r"the spec expects \(8, 8\)$")):
        weights.load(path, shapes)


def test_missing_unexpected_and_mixed_weights_are_named():
    shapes = {"E": (2, 2), "W_out": (2, 2)}
    with pytest.raises(weights.WeightsError, match=r"^x: parameters do not match the spec: "
                                                   r"missing W_out; unexpected W_in$"):
        weights.validate({"E": np.zeros((2, 2)), "W_in": np.zeros((2, 2))}, shapes, "x")
    with pytest.raises(weights.WeightsError, match=r"^x: parameters mix dtypes \(float32, "
                                                   r"float64\); NumPy would silently compute "
                                                   r"in the widest$"):
        weights.validate({"E": np.zeros((2, 2)), "W_out": np.zeros((2, 2), np.float32)},
                         shapes, "x")


def test_weights_file_of_another_kind_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"w.pt: weights are .safetensors or .npz files$"):
        weights.load(tmp_path / "w.pt", {})


# ---------------------------------------------------------------------------------------------
# Random variants (hypothesis): the generated code computes exactly the shapes the checker
# proved, and a distribution over the vocabulary

_MODERN = {"normalization": "rms_norm", "positional": "rotary", "key_value_heads": "grouped",
           "activation": "swiglu", "feed_forward_bias": "none", "attention_bias": "none",
           "head_dims": "split", "output_embedding": "separate", "encoder_io": "lm"}
_SMALL = {"B": 2, "T": 3, "T_dec": 4, "d_model": 8, "H": 2, "H_kv": 1, "d_ff": 5, "V": 7,
          "N": 2, "max_len": 4, "V_type": 1}


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(variants())
# the modern blocks together, as Llama has them, and under the other two architectures
@example(({**_MODERN, "arch": "decoder_only", "norm": "pre"}, _SMALL))
@example(({**_MODERN, "arch": "encoder_decoder", "norm": "post"}, _SMALL))
@example(({**_MODERN, "arch": "encoder_only", "norm": "pre"}, {**_SMALL, "H_kv": 2}))
# Mistral's window (shorter than the sequence) with Qwen2's biases; BertModel without pooler
@example(({**_MODERN, "arch": "decoder_only", "norm": "pre", "attention_window": "sliding",
           "attention_bias": "qkv"}, {**_SMALL, "W": 2}))
@example(({**{name: choice.options[0] for name, choice in SPEC.choices.items()},
           "arch": "encoder_only", "encoder_io": "bert_unpooled", "positional": "learned",
           "attention_bias": "qkv"}, {k: v for k, v in _SMALL.items() if k != "H_kv"}))
# the seeds' model at an odd width: the sinusoidal table's last column is a sin
@example(({name: choice.options[0] for name, choice in SPEC.choices.items()},
          {**{k: v for k, v in _SMALL.items() if k != "H_kv"}, "d_model": 9, "H": 3}))
def test_random_variants_compute_the_proved_shapes_and_the_reference_numbers(variant):
    choices, dims = variant
    variant_object = api.load("transformer", settings_for(SPEC, choices, dims))
    assert api.check(variant_object).ok
    module = generated(**choices)
    params = weights.random_params(weights.expected_shapes(SPEC, choices, dims), 1, np.float64)
    rng = np.random.default_rng(2)
    inputs = []
    for row in api.shapes(variant_object):
        if row.role == "input" and "." not in row.name:
            shape = tuple(int(x) for x in row.concrete.split())
            if "int" in row.dtype:              # token ids index E, token types E_type
                inputs.append(rng.integers(0, dims["V_type" if row.name == "s" else "V"],
                                           shape))
            else:                           # padding anywhere but the first position
                keep = rng.random(shape) < 0.7
                keep[:, 0] = True
                inputs.append(keep)
    trace = {}
    keywords = {name: dims[name] for name, parameter in
                inspect.signature(module.transformer).parameters.items()
                if parameter.kind is parameter.KEYWORD_ONLY and name in dims}
    results = module.transformer(*inputs, params, **keywords, trace=trace)
    names = outputs(SPEC, SPEC.choice_values(choices))
    results = dict(zip(names, results if len(names) > 1 else (results,)))
    computed = {k.replace(".", "/"): v.shape for k, v in weights.flatten(trace).items()}
    proved = {}
    for row in api.shapes(variant_object):
        name = row.name.replace("[i]", "/0").replace(".", "/")
        # a family's size leads, as its array's first axis: "[2] 1 3 3" is (2, 1, 3, 3)
        text = row.concrete.replace("[", "").replace("]", "")
        proved[name] = tuple(int(x) for x in text.split())
    compared = [name for name in computed if name in proved]
    assert len(compared) > 10
    for name in compared:
        assert computed[name] == proved[name], name
    if "probs" in results:
        np.testing.assert_allclose(results["probs"].sum(-1), 1.0)
    # the numbers, against an independent loop-per-head implementation written from the math
    d_k = dims.get("d_k", dims["d_model"] // dims["H"])
    d_v = dims.get("d_v", dims["d_model"] // dims["H"])
    expected = reference_numpy.forward({**choices, "H_kv": dims.get("H_kv"),
                                        "W": dims.get("W")}, params, inputs,
                                       dims["H"], d_k, d_v)
    assert set(expected) == set(names)
    assert_close(results, expected, "float64")


def test_tspec_run_prints_shapes_and_time():
    result = subprocess.run([sys.executable, "-m", "tspec", "run", "base", "--set", "N=1",
                             "--set", "T=8", "--set", "T_dec=8", "--set", "V=50"],
                            capture_output=True, text=True, cwd=api.checkout(), timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "== base (spec/variants/base.toml): spec transformer"
    # (run's default sizes only for the dims the choices use: no max_len, V_type)
    assert lines[2] == ("   dims: B=2, d_model=512, H=8, d_ff=2048, N=1, T=8, T_dec=8, V=50; "
                        "d_k = d_model / H, d_v = d_model / H")
    assert any(line.split() == ["logits", "2", "x", "8", "x", "50"] for line in lines)
    assert lines[-1].startswith("forward pass: ") and lines[-1].endswith(" ms")


def test_tspec_run_bert_base_draws_token_types_from_their_table(capsys):
    code = cli.main(["run", "bert_base", "--set", "N=1", "--set", "T=8", "--set", "V=50",
                     "--dtype", "float64"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[2] == ("   dims: B=2, d_model=768, H=12, d_ff=3072, N=1, V=50, max_len=512, "
                        "V_type=2, T=8; d_k = d_model / H, d_v = d_model / H")
    assert any(line.split() == ["C", "2", "x", "768"] for line in lines)
    assert any(line.split() == ["X_type", "2", "x", "8", "x", "768"] for line in lines)


def test_tspec_run_checks_its_default_sizes_before_running(capsys):
    # learned positions: the run's T_dec=600 breaks T_dec <= max_len (512 by default)
    code = cli.main(["run", "base", "--set", "N=1", "--set", "positional=learned",
                     "--set", "T_dec=600"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert "constraint-violated: T_dec <= max_len does not hold for T_dec=600, max_len=512" \
        in err


def test_tspec_run_refuses_a_negative_seed(capsys):
    assert cli.main(["run", "base", "--set", "N=1", "--seed", "-1"]) == 2
    assert capsys.readouterr().err == ("tspec: error: --seed must be a non-negative integer, "
                                       "got -1\n")


@pytest.mark.parametrize("suffix, content", [(".safetensors", b"\x10\x00garbage"),
                                             (".npz", b"PK\x03\x04broken")])
def test_a_corrupt_weights_file_is_a_usage_error(tmp_path, suffix, content):
    path = tmp_path / f"w{suffix}"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=rf"^cannot read {path}: "):
        weights.load(path, {})


@pytest.mark.parametrize("body, message", [
    ('param E_h[H] "V d"\ninput t "B T" int\nY[H] "B T d" = E_h[t]\n',
     "code generation does not gather from families of tables or ids"),
    ('input A_h[H] "B d"\ninput C "B d"\nY[H] "B 2*d" = concat(A_h, C, axis=-1)\n',
     "code generation does not concat a family with a single tensor"),
    ('input a "B d" bool\ninput b "B d" bool\nY "B d" bool = a - b\n',
     ("code generation does not subtract boolean masks (NumPy refuses it); combine masks "
     "with '*'")),
    ('input a "B d" bool\ninput b "B d" bool\nY "B d" bool = -a\n',
     "code generation does not negate boolean masks (NumPy refuses it)"),
])
def test_constructs_code_generation_lacks_are_named_by_the_checker(body, message):
    """The checker refuses them (the op's shape rule, one place), so that `tspec check` never
    proves a spec `tspec generate` refuses."""
    text = 'dim B "b"\ndim T "t"\ndim d "d"\ndim H "h"\ndim V "v"\n' + body + "output Y\n"
    with raises(SpecError, f"t.tspec:8: Y: {message}"):
        check(parse(text, file="t.tspec"), all_choices=True)
    with raises(SpecError, f"t.tspec:8: Y: {message}"):
        lower(parse(text, file="t.tspec"), {}, backend("numpy"))


def test_a_power_of_a_product_keeps_its_parentheses():
    text = ('dim B "b"\ndim d "d"\ninput X "B d"\nparam W "d d"\n'
            'Y "B d" = (X @ W) ** 3\nZ "B d" = X ** 2\noutput Y, Z\n')
    module = load_source(source(parse(text, file="p.tspec"), {}))
    X, W = np.arange(6.0).reshape(2, 3) / 7, np.arange(9.0).reshape(3, 3) / 5
    Y, Z = module.p(X, {"W": W})
    np.testing.assert_allclose(Y, (X @ W) ** 3)
    np.testing.assert_allclose(Z, X * X)


def test_softmax_over_a_leading_axis_of_a_family_skips_the_family_axis():
    text = ('dim B "b"\ndim T "t"\ndim H "h"\ninput S_h[H] "B T"\n'
            'A_h[H] "B T" = softmax(S_h, axis=0)\noutput A_h\n')
    module = load_source(source(parse(text, file="s.tspec"), {}))
    S = np.random.default_rng(0).standard_normal((3, 4, 5))      # H=3 members of (B=4, T=5)
    expected = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(module.s(S), expected)


def test_generated_text_does_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    before = generate.files()
    monkeypatch.chdir(tmp_path)
    assert generate.files() == before


def test_a_block_named_like_the_spec_is_refused():
    """By the parser, so that `tspec check` never proves what generated code cannot hold."""
    text = ('spec c "t"\ndim B "b"\nblock c(X "B") -> Y:\n    Y "B" = X * 2\n'
            'input Z "B"\nO "B" = c(Z)\noutput O\n')
    with raises(SpecError, "c.tspec:3: block c has the spec's name, which the model's own "
                           "function takes in generated code; rename one"):
        parse(text, file="c.tspec")


ATTENTION = ('dim B "b"\ndim T_q "q"\ndim T_kv "k"\ndim d "d"\n'
             'block attend(Q "B T_q d", K "B T_kv d", V "B T_kv d", L "B T_q T_kv") -> O:\n'
             '    S "B T_q T_kv" = {scores}\n'
             '    A "B T_q T_kv" = softmax(S, axis={axis})\n'
             '    O "B T_q d" = A @ V\n'
             'input Q "B T_q d"\ninput K "B T_kv d"\ninput V "B T_kv d"\n'
             'input L "B T_q T_kv"\n'
             'O "B T_q d" = attend(Q, K, V, L)\noutput O\n')


@pytest.mark.parametrize("scores, axis, blocked", [
    ("Q @ K.T / sqrt(d) + L", -1, True),
    ("Q @ K.T * 2 + L", -1, True),
    ("Q @ K.T / sqrt(d) + L", 2, True),        # the last axis, counted from the first
    ("Q @ K.T / sqrt(d) + L", 1, False),       # softmax over the query rows
    ("Q @ K.T / sqrt(d) + L", -2, False),
    ("L + Q @ K.T", -1, False),                # the mask not the last term: not recognised
    ("Q @ K.T * L", -1, False),                # no additive mask
])
def test_attention_blocks_only_where_blocks_give_the_same_numbers(scores, axis, blocked,
                                                                  monkeypatch):
    spec = parse(ATTENTION.replace("{scores}", scores).replace("{axis}", str(axis)),
                 file="a.tspec")
    text = source(spec, {})
    assert ("        return rt.attend_in_blocks(" in text) is blocked
    module = load_source(text)
    if blocked:
        monkeypatch.setattr(module.rt, "QUERY_BLOCK", 2)
    rng = np.random.default_rng(0)
    Q, K, V = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 6, 3)), \
        rng.standard_normal((2, 6, 3))
    L = np.where(np.tri(5, 6, dtype=bool), 0.0, -np.inf if blocked else -30.0)[None]
    L = L.repeat(2, 0)
    blocks = module.a(Q, K, V, L)
    whole = module.a(Q, K, V, L, trace={})
    np.testing.assert_allclose(blocks, whole, rtol=1e-13, atol=1e-13)


MASKED = ('dim B "b"\ndim T_q "q"\ndim T_kv "k"\ndim d "d"\n'
          'block attend(X "{x}", V "B T_kv d", L "B T_q T_kv") -> O:\n'
          '    S "B T_q T_kv" = {scores}\n'
          '    A "B T_q T_kv" = softmax(S, axis=-1)\n'
          '    O "B T_q d" = A @ V\n'
          'input X "{x}"\ninput V "B T_kv d"\ninput L "B T_q T_kv"\n'
          'O "B T_q d" = attend(X, V, L)\noutput O\n')


@pytest.mark.parametrize("x, scores", [
    ("B T_q T_kv", "X * 2 + L"),            # a product: a new array of the scores' shape
    ("B T_q T_kv", "X + L"),                # the caller's own array
    ("B T_q T_kv", "X.T.T + L"),            # a view of it
    ("T_q T_kv", "X * 2 + L"),              # a new array, but smaller than the scores
])
def test_scores_that_are_no_product_of_queries_and_keys_are_computed_as_written(x, scores,
                                                                               monkeypatch):
    """An attention core whose scores are not q @ k.T + L has no strategy: its equations run
    as written, traced or not, and the caller's array is left as it was (the mask is added
    into a block's scores only inside rt.attend_in_blocks, to its own product)."""
    spec = parse(MASKED.replace("{x}", x).replace("{scores}", scores), file="m.tspec")
    text = source(spec, {})
    assert "rt.attend_in_blocks" not in text and "rt.add_into" not in text
    module = load_source(text)
    monkeypatch.setattr(module.rt, "QUERY_BLOCK", 2)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 5, 6) if x.startswith("B") else (5, 6))
    V = rng.standard_normal((2, 6, 3))
    L = np.where(np.tri(5, 6, dtype=bool), 0.0, -np.inf)[None].repeat(2, 0)
    given = X.copy()
    expected = scipy.special.softmax(X * (2 if "2" in scores else 1) + L, axis=-1) @ V
    for trace in (None, {}):
        np.testing.assert_allclose(module.m(X, V, L, trace=trace), expected, rtol=1e-13,
                                   atol=1e-13)
        np.testing.assert_array_equal(X, given)


def test_scores_broadcast_over_heads_and_dtypes_as_x_plus_l_does():
    """add_into adds the mask into the scores only where the sum keeps their shape and dtype:
    one head's queries and keys (#H = 1) with a mask for three heads give three heads'
    outputs, and float16 scores with a float32 mask give float32, as S = X + L did."""
    module = load_module(GENERATED / "numpy" / "encoder_only.py")
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((1, 2, 5, 4)) for _ in range(3))
    L = np.where(rng.random((3, 2, 5, 5)) < 0.3, -np.inf, 0.0)
    L[..., 0] = 0.0                                        # every query sees a key
    expected = scipy.special.softmax(Q @ K.swapaxes(-1, -2) / 2 + L, axis=-1) @ V
    for trace in (None, {}):
        np.testing.assert_allclose(module.scaled_dot_product_attention(Q, K, V, L, trace=trace),
                                   expected, rtol=1e-13, atol=1e-13)
    half = [x.astype(np.float16) for x in (Q, K, V)]
    O = module.scaled_dot_product_attention(*half, L.astype(np.float32))
    assert O.dtype == np.float32
    np.testing.assert_allclose(O, expected, rtol=0, atol=1e-2)


# specs whose models bind the code names the built-in spec's do not: a block applied to each
# member of a family (member), a function with no float array to take its dtype from (dtype)
NAMING = {
    "members": ('dim B "b"\ndim H "h"\ndim d "d"\nblock double(X "B d") -> Y:\n'
                '    Y "B d" = X * 2\ninput X_h[H] "B d"\nY_h[H] "B d" = double(X_h)\n'
                'output Y_h\n'),
    "table": 'dim T "t"\ndim d "d"\nP "T d" = sinusoidal_encoding(T, d)\noutput P\n',
}


def spec_names(spec) -> set[str]:
    """Every name a spec gives, as its generated model may bind it: dims, the op catalogue's
    settings, blocks (a decoding step's ..._step too), their parameter classes, tensors and
    block instances (fields of the parameter classes)."""
    names = set(spec.dims) | set(SETTINGS)

    def walk(statements):
        for statement in statements:
            if isinstance(statement, When):
                walk(statement.body)
                walk(statement.otherwise)
            elif isinstance(statement, TensorDecl):
                names.add(statement.name)
            elif isinstance(statement, Equation):
                names.add(statement.output)
            elif isinstance(statement, BlockCall):
                names.update((statement.output, statement.instance))

    walk(spec.body)
    functions = {spec.name} | set(spec.blocks)
    for block in spec.blocks.values():
        names |= set(block.local_dims) | {decl.name for decl in block.inputs}
        walk(block.body)
    functions |= {step_function(name) for name in spec.blocks} | {step_function(None)}
    classes = {"".join(part.capitalize() for part in name.split("_")) + "Params"
               for name in functions}
    return names | functions | classes


def generated_models() -> list[tuple[str, str, set[str]]]:
    """Every committed model module, and the models of NAMING: name, text, the spec's names."""
    models = [(f"{path.parent.name}/{path.name}", path.read_text(encoding="utf-8"),
               spec_names(SPEC))
              for path in sorted(GENERATED.glob("*/*.py")) if not path.name.startswith("_")]
    for name, text in NAMING.items():
        spec = parse(text, file=f"{name}.tspec")
        models.append((name, source(spec, {}), spec_names(spec)))
    return models


def _tables(table: symtable.SymbolTable):
    yield table
    for child in table.get_children():
        yield from _tables(child)


def unbound_names(text: str) -> set[tuple[str, str]]:
    """The names a module's functions or its top level read that nothing binds (an argument
    or local, a module-level definition or import, a builtin): (scope, name)."""
    top = symtable.symtable(text, "generated", "exec")
    defined = {s.get_name() for s in top.get_symbols()
               if s.is_assigned() or s.is_imported() or s.is_namespace()}
    known = defined | set(dir(builtins)) | {"__name__"}
    return {(table.get_name(), s.get_name()) for table in _tables(top)
            for s in table.get_symbols()
            if s.is_referenced() and s.is_global() and s.get_name() not in known}


def test_every_name_generated_code_reads_is_bound():
    """In every model and runtime module, each name read is bound there. A helper called
    without its `rt.` prefix would be a name nothing binds, as the last case shows."""
    texts = [(name, text) for name, text, _ in generated_models()] + [
        (f"{backend_name}/_runtime.py", generate.runtime_source(backend_name))
        for backend_name in ("numpy", "cupy")]
    for name, text in texts:
        assert unbound_names(text) == set(), name
    text = source(SPEC, {}).replace("rt.softmax(logits)", "softmax(logits)", 1)
    assert unbound_names(text) == {("transformer", "softmax")}


def test_a_model_binds_only_its_spec_names_and_the_code_names():
    """Every name a model module binds (at module level, and in its functions: arguments and
    locals) is one of its spec's or one of CODE_NAMES (tspec.codegen.lowering.spelling), which a
    spec name is spelt apart from; and every code name is bound by some model, so that the list
    holds no more."""
    used = set()
    for name, text, names in generated_models():
        bound = {s.get_name() for table in _tables(symtable.symtable(text, name, "exec"))
                 for s in table.get_symbols()
                 if (s.is_assigned() or s.is_imported() or s.is_parameter() or s.is_namespace())
                 and not s.get_name().startswith(".")}       # a comprehension's own argument
        # an entry function's memory count: <function>_bytes
        counts = {n for n in bound if n.endswith("_bytes") and n.removesuffix("_bytes") in bound}
        assert sorted(bound - names - CODE_NAMES - counts) == [], name
        used |= bound & CODE_NAMES
    assert sorted(CODE_NAMES - used) == []


def test_spec_names_may_be_the_runtime_helpers_names():
    """A block, dim or tensor named as a helper, or as a module the runtime imports, is the
    spec's own name: the helpers sit behind `rt.`."""
    text = ('spec helpers "named as the runtime\'s helpers"\ndim B "b"\ndim T "t"\n'
            'dim os "width"\nblock project(X "B T os") -> extend:\n'
            '    param workspace "os os"\n    extend "B T os" = relu(X @ workspace)\n'
            'input subtrace "B T os"\nin_parallel "B T os" = project(subtrace)\n'
            'output in_parallel\n')
    module = load_source(source(parse(text, file="h.tspec"), {}))
    rng = np.random.default_rng(0)
    X, W = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 4))
    trace = {}
    result = module.helpers(X, {"project": {"workspace": W}}, trace=trace)
    np.testing.assert_allclose(result, np.maximum(X @ W, 0), rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(trace["project"]["extend"], result)


def test_a_parameter_the_model_outputs_is_returned():
    """`output W` of a parameter W: the generated code raised NameError (issue 23)."""
    text = ('spec outparam "a parameter as output"\ndim B "b"\ndim d "w"\nparam W "d d"\n'
            'input X "B d"\nY "B d" = X @ W\noutput Y\noutput W\n')
    module = load_source(source(parse(text, file="o.tspec"), {}))
    X, W = np.ones((2, 3)), np.arange(9.0).reshape(3, 3)
    Y, returned = module.outparam(X, {"W": W})
    np.testing.assert_array_equal(Y, X @ W)
    assert returned is W


@pytest.mark.parametrize("model", ["decoder_only", "llama"])
def test_a_decoding_steps_parameter_classes_are_the_full_models(model):
    # a step whose blocks take the full model's parameters (a cached self-attention takes
    # multi_head_attention's) declared its own copies of every class above them
    module = load_module(generate.default_dir() / "numpy" / f"{model}.py")
    assert module.CachedSelfAttentionParams is module.MultiHeadAttentionParams
    assert module.DecoderLayerStepParams is module.DecoderLayerParams
    assert module.DecoderStepParams is module.DecoderParams
    assert module.DecodeStepParams is module.TransformerParams


def test_a_step_that_takes_other_parameters_keeps_classes_of_its_own():
    # the encoder-decoder's cached cross-attention reads the source's keys and values from the
    # cache, not W_K and W_V: its layer's parameters are not the full layer's
    module = load_module(generate.default_dir() / "numpy" / "encoder_decoder.py")
    assert set(module.CachedCrossAttentionParams.__annotations__) == {"W_Q", "W_O"}
    assert module.DecoderLayerStepParams is not module.DecoderLayerParams
    assert module.DecodeStepParams is not module.TransformerParams
