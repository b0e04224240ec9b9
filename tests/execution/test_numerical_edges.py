"""Numerical edge cases of the generated code, on every backend that can run here.

Each test pins the defined result (README.md, "Numerical edge cases"; the helpers' docstrings)
and fails without the protection that gives it:

- a fully masked attention row: weights 0 and attention output 0, never NaN;
- very large and very small logits: softmax as in float64, without overflow or a warning; a
  row holding +inf: the limit (its +inf entries share the weight);
- float16: softmax, LayerNorm and RMSNorm work in float32 and return float16 (a sum of 128256
  weights near 1, or a square of 256, overflows float16); GELU returns float16 too;
- a constant LayerNorm row: beta exactly, under any eps >= 0; an RMSNorm row of zeros: zeros;
- an empty batch (B = 0); one position (T = 1), and decoding one position after a prompt of
  one position or of none;
- token ids V - 1 (the table's last row) work; V and -1 are refused, naming the table, the id
  and the range.

The models are the committed generated modules (generated/<backend>/<model>.py) at small sizes
with seeded random weights. The CuPy cases need CuPy and a GPU, and skip saying why without
them (as in CI); the cupy-on-cpu cases run the same CuPy modules on the CPU (its kernels
compiled by g++ and emulated, its array code on NumPy: tests/support/cupy_on_cpu).
"""

import functools
import inspect
import warnings

import numpy as np
import pytest
from scipy.special import erf
from support.arrays import BACKENDS, CUPY, CUPY_ON_CPU, MARKS, NUMPY, to_numpy
from support.arrays import keywords as required_keywords
from support.compare import assert_close, flat
from support.reference_numpy import softmax as softmax_reference
from support.specs import builtin_line

from tspec import api
from tspec.codegen.generate import BUILTIN_MODELS, source
from tspec.execution import weights

# lines of the built-in spec, found by their text
POSITIONS = builtin_line("require T <= max_len")

SPEC = api.read_spec(api.BUILTIN_SPEC)
MODELS = list(BUILTIN_MODELS)        # encoder_decoder, encoder_only, decoder_only, bert, llama
DECODERS = ["encoder_decoder", "decoder_only", "llama"]           # the ones with decode_step
SIZES = {"d_model": 8, "H": 2, "H_kv": 1, "d_ff": 12, "N": 2, "V": 11, "V_type": 2,
         "max_len": 8}
BACKEND_FLOATS = [pytest.param(arrays, dtype, id=f"{arrays}-{dtype}", marks=MARKS[arrays])
                  for arrays in (NUMPY, CUPY, CUPY_ON_CPU)
                  for dtype in ("float64", "float32", "float16")]


def model(arrays, name: str):
    """The committed generated module (imported only when asked: CuPy's needs a GPU)."""
    return arrays.committed(name)


@functools.cache
def generated(arrays, **choices):
    """A module generated now, for a helper that no committed one has (tanh GELU)."""
    return arrays.load(source(SPEC, choices, arrays.backend))


def params(arrays, name, dtype, seed=0, feed_forward_scale=1.0):
    """Seeded random weights at SIZES; every feed-forward output (W_2, b_2) scaled by
    ``feed_forward_scale``."""
    shapes = weights.expected_shapes(SPEC, BUILTIN_MODELS[name], SIZES)
    flat_params = weights.flatten(weights.random_params(shapes, seed, np.float64))
    for key in flat_params:
        if key.endswith(("feed_forward.W_2", "feed_forward.b_2")):
            flat_params[key] = flat_params[key] * feed_forward_scale
    return arrays.put(weights.nest({k: v.astype(dtype) for k, v in flat_params.items()}))


def inputs(function, B, T, T_src=None, seed=0) -> dict:
    """The arguments of a generated entry point before ``params``, by name: ids in range, key
    masks all True. An encoder-decoder's source (t, m_src) is T_src long, all else T long."""
    parameters = inspect.signature(function).parameters
    two_sequences = "t" in parameters and "u" in parameters
    rng = np.random.default_rng(seed)
    args = {}
    for name in parameters:
        if name == "params":
            break
        length = T_src if two_sequences and name in ("t", "m_src") else T
        if name.startswith("m"):
            args[name] = np.ones((B, length), dtype=bool)
        else:                                          # token ids, or token types (s)
            rows = SIZES["V_type" if name == "s" else "V"]
            args[name] = rng.integers(0, rows, (B, length))
    return args


def keywords(function) -> dict:
    """The keyword arguments a generated function requires (H, H_kv), at SIZES."""
    return required_keywords(function, **SIZES)


def run(arrays, module, args: dict, P, trace=None) -> list:
    """The model's forward (``transformer``) on these arguments, its outputs as NumPy arrays."""
    result = module.transformer(*arrays.put(list(args.values())), P,
                                **keywords(module.transformer), trace=trace)
    return [to_numpy(output) for output in result]


def named(outputs: list) -> dict:
    """Outputs by name, for compare.assert_close."""
    return {f"output {index}": output for index, output in enumerate(outputs)}


def traced(trace: dict, suffix: str) -> dict:
    """Every traced tensor whose dotted name ends in ``suffix``, as NumPy arrays."""
    found = {k: to_numpy(v) for k, v in flat(trace).items() if k.endswith(suffix)}
    assert found, f"nothing traced ends in {suffix}"
    return found


def no_warnings(function, *args):
    """function(*args), a warning (an overflow, an invalid value) raised as an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return function(*args)


# ---------------------------------------------------------------------------------------------
# Fully masked rows

@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("arrays", BACKENDS)
def test_a_fully_masked_sequence_attends_to_nothing(arrays, name):
    """Sequence 1 is padding only: every key of every attention is masked for its queries.
    Their weights A_h and attention outputs O_h are 0 exactly (not NaN), every output is
    finite, the untraced forward (query blocks on NumPy, the fused kernel on CuPy) gives the
    traced one's numbers, and sequence 0 gets what it gets alone."""
    module = model(arrays, name)
    P = params(arrays, name, "float64")
    args = inputs(module.transformer, 2, 4, T_src=3)
    for value in args.values():
        if value.dtype == bool:
            value[1] = False
    trace = {}
    outputs = run(arrays, module, args, P, trace)
    untraced = run(arrays, module, args, P)
    alone = run(arrays, module, {k: v[:1] for k, v in args.items()}, P)
    for tensor_name, weights_ in traced(trace, ".A_h").items():
        assert (weights_[:, 1] == 0).all(), tensor_name
        np.testing.assert_allclose(weights_[:, 0].sum(-1), 1.0, rtol=1e-12, err_msg=tensor_name)
    for tensor_name, output in traced(trace, ".O_h").items():
        assert (output[:, 1] == 0).all(), tensor_name
    for index, output in enumerate(outputs):
        assert np.isfinite(output).all(), index
    assert_close(named(untraced), named(outputs), "float64", 1e-12)
    assert_close(named([output[:1] for output in outputs]), named(alone), "float64", 1e-12)


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("arrays", BACKENDS)
def test_a_query_whose_visible_keys_are_all_padding_gets_zero_weights(arrays, name):
    """Under the causal mask, a padded first target position leaves query 0 no key at all:
    its self-attention weights are 0; the later queries attend to the positions after it."""
    module = model(arrays, name)
    args = inputs(module.transformer, 2, 4, T_src=3)
    args["m_tgt"][:, 0] = False
    trace = {}
    outputs = run(arrays, module, args, params(arrays, name, "float64"), trace)
    self_attention = {k: v for k, v in traced(trace, ".A_h").items()
                      if k.startswith("decoder.") and "self_attention" in k}
    assert self_attention
    for tensor_name, weights_ in self_attention.items():
        assert (weights_[..., 0, :] == 0).all(), tensor_name
        assert (weights_[..., 1:, 0] == 0).all(), tensor_name
        np.testing.assert_allclose(weights_[..., 1:, :].sum(-1), 1.0, rtol=1e-12)
    assert all(np.isfinite(output).all() for output in outputs)


# ---------------------------------------------------------------------------------------------
# Very large and very small logits

@pytest.mark.parametrize("arrays, dtype", BACKEND_FLOATS)
def test_softmax_of_huge_and_tiny_logits_matches_float64(arrays, dtype):
    """Logits 1e4 apart, 1e-30 apart, and as far apart as the dtype holds (its largest and
    its most negative value): the float64 softmax of the same numbers, without an overflow
    or a warning. Tolerance: the dtype's rounding of a weight (weights are at most 1)."""
    big = float(np.finfo(dtype).max)
    x = np.array([[1e4, -1e4, 1e-30, 0.0],
                  [-1e4, -1e4 + 8, -1e4 + 16, -1e4 + 24],
                  [1e-30, -1e-30, 0.0, 1e-38],
                  [big, big / 2, 0.0, -big],
                  [-big, -big, -big, -big],
                  [-big, -np.inf, -np.inf, -np.inf]]).astype(dtype)
    y = to_numpy(no_warnings(model(arrays, "encoder_only").rt.softmax, arrays.put(x)))
    assert y.dtype == np.dtype(dtype)
    tolerance = {"float64": 1e-15, "float32": 2.0 ** -23, "float16": 2.0 ** -10}[dtype]
    np.testing.assert_allclose(y.astype(np.float64), softmax_reference(x), rtol=0,
                               atol=tolerance)
    np.testing.assert_array_equal(y[3], [1, 0, 0, 0])
    np.testing.assert_array_equal(y[5], [1, 0, 0, 0])


@pytest.mark.parametrize("arrays, dtype", BACKEND_FLOATS)
def test_softmax_of_a_row_holding_inf_is_its_limit(arrays, dtype):
    """A +inf logit (an overflow upstream) takes the row's weight, shared among the +inf
    entries, instead of making the row NaN; a NaN still makes its row NaN; other rows of the
    same call are untouched."""
    inf = np.inf
    x = np.array([[inf, 0.0, 1.0, inf],
                  [inf, -inf, 5.0, -3.0],
                  [np.nan, 0.0, 1.0, inf],
                  [1.0, 2.0, 3.0, -inf]]).astype(dtype)
    y = to_numpy(no_warnings(model(arrays, "encoder_only").rt.softmax, arrays.put(x)))
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y[0], [0.5, 0, 0, 0.5])
    np.testing.assert_array_equal(y[1], [1, 0, 0, 0])
    assert np.isnan(y[2]).all()
    np.testing.assert_allclose(y[3].astype(np.float64), softmax_reference(x[3]), rtol=2e-3)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_softmax_matmul_is_softmax_then_matmul_on_every_kind_of_row(dtype):
    """NumPy's untraced attention divides by the row sums after the product with V
    (softmax_matmul): on the rows above (huge and tiny logits, a fully masked row, rows
    holding +inf) it gives float64's softmax(S) @ V within the dtype's rounding of the
    product, in S's dtype, without a warning, overwriting S (but in float16). In float16 the exponentials are
    multiplied by V in float32: 128 weights near 1 times values near 1000 sum past 65504, so
    a float16 product before the division would be inf."""
    big = float(np.finfo(dtype).max)
    inf = np.inf
    S = np.array([[1e4, -1e4, 1e-30, 0.0], [-1e4, -1e4 + 8, -1e4 + 16, -1e4 + 24],
                  [big, big / 2, 0.0, -big], [-big, -inf, -inf, -inf],
                  [-inf, -inf, -inf, -inf], [inf, 0.0, 1.0, inf], [inf, -inf, 5.0, -3.0]])
    S = S.astype(dtype)[None]                                                # 1 7 4
    V = np.random.default_rng(0).standard_normal((1, 4, 3)).astype(dtype)   # 1 4 3
    module = model(NUMPY, "encoder_only")
    # softmax in float64, its limit on the +inf rows (pinned against float64 above)
    expected = module.rt.softmax(S.astype(np.float64)) @ V.astype(np.float64)
    given = S.copy()
    O = no_warnings(module.rt.softmax_matmul, given, V)
    assert O.dtype == np.dtype(dtype) and O.shape == (1, 7, 3)
    tolerance = {"float64": 1e-15, "float32": 2.0 ** -21, "float16": 2.0 ** -8}[dtype]
    np.testing.assert_allclose(O.astype(np.float64), expected, rtol=0, atol=tolerance)
    np.testing.assert_array_equal(O[0, 4], 0)                  # every key masked: nothing
    # S holds the exponentials now; float16 works in a float32 copy and leaves it
    assert np.array_equal(given, S, equal_nan=True) == (dtype == "float16")
    if dtype == "float16":
        S = np.zeros((1, 1, 128), dtype=np.float16)
        V = np.full((1, 128, 1), 1000.0, dtype=np.float16)
        np.testing.assert_array_equal(module.rt.softmax_matmul(S, V), [[[1000.0]]])


# ---------------------------------------------------------------------------------------------
# float16: statistics in float32, float16 out

@pytest.mark.parametrize("arrays", BACKENDS)
def test_float16_softmax_sums_in_float32(arrays):
    """Llama 3's 128256 logits, close together: the sum of their exponentials (about 8e4)
    overflows float16, which made every weight 0. Summed in float32, each weight is float64's
    rounded to float16: within 2^-10 relative, or 2^-24 absolute below float16's smallest
    normal (6.1e-5, where the weights near 1/128256 lie)."""
    x = (np.random.default_rng(0).standard_normal((2, 128256)) * 0.1).astype(np.float16)
    y = to_numpy(no_warnings(model(arrays, "llama").rt.softmax, arrays.put(x)))
    assert y.dtype == np.float16
    expected = softmax_reference(x)
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=2.0 ** -10, atol=2.0 ** -24)
    np.testing.assert_allclose(y.astype(np.float64).sum(-1), 1.0, rtol=1e-2)


def large_activations(d=64, seed=0):
    """float16 rows of the sizes float16 models meet: +-300 (a variance past 65504), 1000
    plus a little (a large mean, a small spread), normal values with one outlier of 5000,
    and values of thousands."""
    rng = np.random.default_rng(seed)
    rows = [np.tile([300.0, -300.0], d // 2),
            1000.0 + rng.integers(-3, 4, d),
            np.where(np.arange(d) == 5, 5000.0, rng.standard_normal(d)),
            rng.standard_normal(d) * 3000.0]
    return np.array(rows).astype(np.float16)


@pytest.mark.parametrize("arrays", BACKENDS)
def test_float16_layer_norm_of_large_activations(arrays):
    """The mean, the variance and the normalised values in float32, the result rounded to
    float16 once: float64's LayerNorm of the same float16 numbers, within float16's rounding
    (2^-10 relative, 1e-3 absolute near 0). The variance summed in float16 overflowed, which
    made the rows beta."""
    x = large_activations()
    rng = np.random.default_rng(1)
    gamma = (1.0 + 0.1 * rng.standard_normal(64)).astype(np.float16)
    beta = (0.1 * rng.standard_normal(64)).astype(np.float16)
    module = model(arrays, "encoder_only")
    y = to_numpy(no_warnings(module.rt.layer_norm, *arrays.put([x, gamma, beta]), 1e-5))
    assert y.dtype == np.float16
    x64 = x.astype(np.float64)
    centred = x64 - x64.mean(-1, keepdims=True)
    expected = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5) * \
        gamma.astype(np.float64) + beta.astype(np.float64)
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=2.0 ** -10, atol=1e-3)


@pytest.mark.parametrize("arrays", BACKENDS)
def test_float16_rms_norm_of_large_activations(arrays):
    """The mean square and the normalised values in float32, rounded to float16 once:
    float64's RMSNorm within float16's rounding. Squares in float16 overflowed, which made the
    rows 0."""
    x = large_activations()
    gamma = (1.0 + 0.1 * np.random.default_rng(1).standard_normal(64)).astype(np.float16)
    y = to_numpy(no_warnings(model(arrays, "llama").rt.rms_norm,
                             *arrays.put([x, gamma]), 1e-5))
    assert y.dtype == np.float16
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * gamma
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=2.0 ** -10, atol=1e-3)


@pytest.mark.parametrize("arrays", BACKENDS)
def test_float16_gelu_stays_float16(arrays):
    """Exact and tanh GELU of float16 give float16 (exact GELU gave float64), computed in
    float32 without overflow (x * x overflows float16 past 256): within float16's rounding of
    float64's, relative to max(1, |x|)."""
    x = np.concatenate([np.linspace(-8, 8, 161), [-60000.0, -1000.0, -300.0, 300.0, 1000.0,
                                                   60000.0]]).astype(np.float16)
    xs = x.astype(np.float64)
    exact = 0.5 * xs * (1 + erf(xs / np.sqrt(2)))
    tanh_form = 0.5 * xs * (1 + np.tanh(np.sqrt(2 / np.pi) * (xs + 0.044715 * xs ** 3)))
    gelu = model(arrays, "bert").rt.gelu
    gelu_tanh = generated(arrays, arch="decoder_only", activation="gelu_tanh").rt.gelu_tanh
    for function, expected in ((gelu, exact), (gelu_tanh, tanh_form)):
        y = to_numpy(no_warnings(function, arrays.put(x)))
        assert y.dtype == np.float16, function.__name__
        error = np.abs(y.astype(np.float64) - expected) / np.maximum(1.0, np.abs(xs))
        assert error.max() <= 2.0 ** -10, function.__name__


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("arrays", BACKENDS)
def test_float16_models_with_large_activations_match_float64(arrays, name):
    """Every traced tensor of a float16 forward whose feed-forward outputs are a thousand
    times larger (residual streams of thousands, as float16 models meet: their norms'
    variance overflowed float16, which made the norms' outputs beta or 0, silently finite)
    against the float64 forward of the same float16 weights, within compare.TOLERANCES' 1e-2
    for float16 (relative to each tensor's scale); the outputs float16 and finite."""
    module = model(arrays, name)
    P16 = params(NUMPY, name, "float16", feed_forward_scale=1000.0)
    P64 = {k: v.astype(np.float64) for k, v in weights.flatten(P16).items()}
    args = inputs(module.transformer, 2, 5, T_src=4)
    trace16, trace64 = {}, {}
    outputs = no_warnings(run, arrays, module, args, arrays.put(P16), trace16)
    run(arrays, module, args, arrays.put(weights.nest(P64)), trace64)
    assert all(o.dtype == np.float16 and np.isfinite(o).all() for o in outputs)
    floats = {k: v for k, v in flat(trace16).items() if v.dtype != bool}
    assert_close(floats, {k: flat(trace64)[k] for k in floats}, "float16")


# ---------------------------------------------------------------------------------------------
# Zero variance

@pytest.mark.parametrize("eps", [1e-5, 1e-12, 0.0])
@pytest.mark.parametrize("arrays, dtype", BACKEND_FLOATS)
def test_layer_norm_of_a_constant_row_is_beta_exactly(arrays, dtype, eps):
    """Constant rows (zero variance) of any value and width give beta exactly, under BERT's
    eps 1e-12 and eps 0 too. Their mean's rounding error (0.1 summed 768 times is not 76.8)
    divided by sqrt(that error squared + eps) was up to +-1, and eps 0 (or 1e-12, 0 in
    float16) gave 0 / 0 = NaN."""
    values = [0.0, 5.0, 0.1, 1 / 3, 0.7, -2.5, 1e4] + ([1e10] if dtype != "float16" else [])
    module = model(arrays, "encoder_only")
    for width in (8, 768, 1000):
        x = np.repeat(np.array(values)[:, None], width, axis=1).astype(dtype)
        rng = np.random.default_rng(width)
        gamma = rng.standard_normal(width).astype(dtype)
        beta = rng.standard_normal(width).astype(dtype)
        y = to_numpy(no_warnings(module.rt.layer_norm, *arrays.put([x, gamma, beta]), eps))
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(y, np.broadcast_to(beta, x.shape), err_msg=str(width))


@pytest.mark.parametrize("eps", [1e-6, 1e-12, 0.0])
@pytest.mark.parametrize("arrays, dtype", BACKEND_FLOATS)
def test_rms_norm_of_a_row_of_zeros_is_zeros(arrays, dtype, eps):
    """RMSNorm of zeros is 0 exactly, under eps 0 too (0 / 0 was NaN; so was eps 1e-12,
    which is 0 in float16)."""
    x = np.zeros((3, 16), dtype=dtype)
    gamma = np.random.default_rng(0).standard_normal(16).astype(dtype)
    y = to_numpy(no_warnings(model(arrays, "llama").rt.rms_norm, *arrays.put([x, gamma]), eps))
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, 0)


# ---------------------------------------------------------------------------------------------
# Empty batch, one position

def step_arguments(module, full: dict, start: int, stop: int | None = None) -> list:
    """decode_step's arguments before params for positions start .. stop - 1 of ``full``
    (the full forward's arguments by name): the new ids, every key mask so far."""
    stop = start + 1 if stop is None else stop
    given = {"u": full["u"][:, start:stop], "m_tgt": full["m_tgt"][:, :stop],
             "m_src": full.get("m_src")}
    names = list(inspect.signature(module.decode_step).parameters)
    return [given[name] for name in names[:names.index("params")]]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("arrays, dtype", BACKEND_FLOATS)
def test_an_empty_batch_gives_empty_outputs(arrays, dtype, name):
    """B = 0: every output has a batch axis of 0, the other axes and the dtype of B = 1's,
    traced and untraced; a decoder's prefill and decode_step too (concat_heads could not
    reshape an empty array)."""
    module = model(arrays, name)
    P = params(arrays, name, dtype)
    expected = [(0,) + o.shape[1:] for o in run(arrays, module, inputs(
        module.transformer, 1, 4, T_src=3), P)]
    args = inputs(module.transformer, 0, 4, T_src=3)
    for outputs in (run(arrays, module, args, P), run(arrays, module, args, P, {})):
        assert [o.shape for o in outputs] == expected
        assert all(o.dtype == np.dtype(dtype) for o in outputs)
    if name in DECODERS:
        logits, _, cache = module.prefill(*arrays.put(list(args.values())), P,
                                          **keywords(module.prefill))
        assert to_numpy(logits).shape == expected[0]
        step = step_arguments(module, args | {"u": np.zeros((0, 5), dtype=np.int64),
                                              "m_tgt": np.ones((0, 5), dtype=bool)}, 4)
        logits, _ = module.decode_step(*arrays.put(step), P, cache,
                                       **keywords(module.decode_step))
        assert to_numpy(logits).shape == (0, 1, SIZES["V"])
        assert logits.dtype == np.dtype(dtype)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("arrays", BACKENDS)
def test_one_position(arrays, name):
    """T = 1 (an encoder-decoder's source of 1 too): the causal mask is [[True]], every
    attention weight is 1 exactly, the outputs are finite, and untraced equals traced."""
    module = model(arrays, name)
    P = params(arrays, name, "float64")
    args = inputs(module.transformer, 2, 1, T_src=1)
    trace = {}
    outputs = run(arrays, module, args, P, trace)
    for tensor_name, weights_ in traced(trace, ".A_h").items():
        assert weights_.shape[-2:] == (1, 1), tensor_name
        assert (weights_ == 1).all(), tensor_name
    if "M_self" in trace:
        np.testing.assert_array_equal(to_numpy(trace["M_self"]), np.ones((2, 1, 1), dtype=bool))
    assert all(np.isfinite(output).all() for output in outputs)
    assert_close(named(run(arrays, module, args, P)), named(outputs), "float64", 1e-12)


@pytest.mark.parametrize("prompt", [1, 0])
@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("arrays", BACKENDS)
def test_decoding_one_position(arrays, name, prompt):
    """Prefill over a prompt of one position, or of none (an empty cache), then decode_step
    over one position: its logits are the full forward's at that position (float64, 1e-10),
    and every layer's cache holds prompt + 1 positions. An empty prompt failed: no query
    block for no query, and no maximum of an empty row."""
    module = model(arrays, name)
    P = params(arrays, name, "float64")
    full = inputs(module.transformer, 2, prompt + 1, T_src=3)
    expected, _ = run(arrays, module, full, P)
    prompt_args = {k: v[:, :prompt] if k in ("u", "m_tgt") else v for k, v in full.items()}
    logits, _, cache = module.prefill(*arrays.put(list(prompt_args.values())), P,
                                      **keywords(module.prefill))
    assert to_numpy(logits).shape == (2, prompt, SIZES["V"])
    step, _ = module.decode_step(*arrays.put(step_arguments(module, full, prompt)), P, cache,
                                 **keywords(module.decode_step))
    assert_close({"logits": step}, {"logits": expected[:, prompt:]}, "float64")
    for layer in cache["decoder"]["layers"]:
        assert layer["self_attention"]["K_past"].shape[-2] == prompt + 1


# ---------------------------------------------------------------------------------------------
# Token ids at the ends of the table

# (model, id input, its traced embedding, the table, the messages for id V (or V_type) and -1)
E_MESSAGES = ("id 11 at index (1, 2) is out of range: ids index the 11 rows of E (0..10)",
              "id -1 at index (1, 2) is out of range: ids index the 11 rows of E (0..10)")
E_TYPE_MESSAGES = ("id 2 at index (1, 2) is out of range: ids index the 2 rows of E_type (0..1)",
                   "id -1 at index (1, 2) is out of range: ids index the 2 rows of E_type (0..1)")
ID_INPUTS = [
    ("encoder_decoder", "t", "X", "E", E_MESSAGES),
    ("encoder_decoder", "u", "X_dec", "E", E_MESSAGES),
    ("encoder_only", "t", "X", "E", E_MESSAGES),
    ("decoder_only", "u", "X_dec", "E", E_MESSAGES),
    ("bert", "t", "X", "E", E_MESSAGES),
    ("bert", "s", "X_type", "E_type", E_TYPE_MESSAGES),
    ("llama", "u", "Y_0", "E", E_MESSAGES),
]


@pytest.mark.parametrize("name, ids, embedded, table, messages", ID_INPUTS,
                         ids=[f"{row[0]}-{row[1]}" for row in ID_INPUTS])
@pytest.mark.parametrize("arrays", BACKENDS)
def test_token_ids_at_the_ends_of_the_table(arrays, name, ids, embedded, table, messages):
    """Id V - 1 embeds as the table's last row; V and -1 are refused with a ValueError naming
    the id, where it is, the table and its range (NumPy raised an IndexError for V, and took
    the last row for -1 silently)."""
    module = model(arrays, name)
    P = params(arrays, name, "float32")
    args = inputs(module.transformer, 2, 4, T_src=4)
    rows = SIZES["V_type" if table == "E_type" else "V"]
    args[ids][1, 2] = rows - 1
    trace = {}
    run(arrays, module, args, P, trace)
    np.testing.assert_array_equal(to_numpy(trace[embedded])[1, 2], to_numpy(P[table])[rows - 1])
    for bad, message in zip((rows, -1), messages):
        args[ids][1, 2] = bad
        with pytest.raises(ValueError) as error:
            run(arrays, module, args, P)
        assert str(error.value) == f"{ids}: {message}"   # which input: t and u share E


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("arrays", BACKENDS)
def test_token_ids_out_of_range_in_a_decoding_step(arrays, name):
    """A decoding step's new ids are checked as the full forward's are."""
    module = model(arrays, name)
    P = params(arrays, name, "float32")
    full = inputs(module.transformer, 2, 3, T_src=4)
    prompt_args = {k: v[:, :2] if k in ("u", "m_tgt") else v for k, v in full.items()}
    _, _, cache = module.prefill(*arrays.put(list(prompt_args.values())), P,
                                 **keywords(module.prefill))
    messages = ("u: id 11 at index (1, 0) is out of range: ids index the 11 rows of E (0..10)",
                "u: id -1 at index (1, 0) is out of range: ids index the 11 rows of E (0..10)")
    for bad, message in zip((11, -1), messages):
        full["u"][1, 2] = bad
        with pytest.raises(ValueError) as error:
            module.decode_step(*arrays.put(step_arguments(module, full, 2)), P, cache,
                               **keywords(module.decode_step))
        assert str(error.value) == message


# ---------------------------------------------------------------------------------------------
# Sequences longer than a learned position table

@pytest.mark.parametrize("arrays", BACKENDS)
def test_a_sequence_longer_than_the_position_table_is_refused(arrays):
    """BERT's learned positions have max_len = 8 rows: 9 positions are refused by name (the
    slice P_table[:9] would be 8 rows, and broadcast against a one-row table silently): by
    the entry function's check of the spec's constraint, and by the table's own helper where
    a block reads it."""
    module = model(arrays, "bert")
    P = params(arrays, "bert", "float32")
    run(arrays, module, inputs(module.transformer, 2, 8), P)
    with pytest.raises(ValueError) as error:
        run(arrays, module, inputs(module.transformer, 2, 9), P)
    assert str(error.value) == ("transformer: the arguments break `require T <= max_len` (T=9, "
                                f"max_len=8; spec/transformer.tspec:{POSITIONS})")
    with pytest.raises(ValueError) as error:
        module.rt.table_rows(P["P_table"], "P_table", 0, 9)
    assert str(error.value) == ("P_table has 8 rows, but positions 0 to 8 need 9: a sequence, "
                                "with any positions decoded before it, may be at most 8 long")


# ---------------------------------------------------------------------------------------------
# float16 scores past the dtype's range at masked keys

@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("arrays", BACKENDS)
def test_a_float16_score_overflowing_at_a_masked_key_stays_masked(arrays, traced):
    """Query 0 against key 1 is 2.5e9, +inf in float16, at a key the causal mask hides: the
    scores there are -inf all the same (+inf + -inf would be NaN and make the row NaN), so
    query 0 attends to key 0 alone, as the mask says."""
    module = model(arrays, "decoder_only")
    Q = np.array([[1.0, 60000.0], [1.0, 0.0]], dtype=np.float16)[None, None]     # H B T d
    K = np.array([[1.0, 0.0], [0.0, 60000.0]], dtype=np.float16)[None, None]
    V = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float16)[None, None]
    L = np.where(np.tri(2, 2) == 1, 0.0, -np.inf).astype(np.float16)[None, None]  # causal
    trace = {} if traced else None
    with np.errstate(over="ignore", invalid="ignore"):   # NumPy's warnings of the overflow
        O = to_numpy(module.scaled_dot_product_attention(*arrays.put([Q, K, V, L]),
                                                         trace=trace))
    assert O.dtype == np.float16 and not np.isnan(O).any()
    np.testing.assert_array_equal(O[0, 0, 0], V[0, 0, 0])             # key 0 alone
    scores = np.array([1.0, 0.0]) / np.sqrt(2.0)                      # query 1: both keys
    weights = np.exp(scores) / np.exp(scores).sum()
    np.testing.assert_allclose(O[0, 0, 1], weights @ V[0, 0].astype(np.float64), rtol=2e-3)
    if traced:
        assert to_numpy(trace["S_h"])[0, 0, 0, 1] == -np.inf


@pytest.mark.parametrize("arrays, dtype", [
    pytest.param(arrays, dtype, id=f"{arrays}-{dtype}", marks=MARKS[arrays])
    for arrays in (NUMPY, CUPY, CUPY_ON_CPU) for dtype in ("float64", "float32")])
@pytest.mark.parametrize("score", ["nan", "inf"])
def test_a_nan_or_infinite_score_at_a_masked_key_is_the_equations_nan(arrays, dtype, score):
    """Above float16 the equations hold as written: S = X + L at a masked key whose score is
    NaN (a NaN key) or +inf (an overflow) is NaN, and softmax makes every row that holds it
    NaN, traced or not, on every backend. CuPy's fused kernel (masked_softmax) took a masked
    entry as -inf whatever its score, so its untraced attention gave finite numbers where its
    traced attention and NumPy gave NaN. Keys 0, 1, 3 and 4 are visible; key 2 is masked."""
    module = model(arrays, "decoder_only")
    rng = np.random.default_rng(8)
    Q = rng.standard_normal((1, 2, 3, 4)).astype(dtype)                      # H B T_q d
    K, V = (rng.standard_normal((1, 2, 5, 4)).astype(dtype) for _ in range(2))
    if score == "nan":
        K[:, :, 2] = np.nan
    else:                                      # Q . K past the dtype's range: +inf
        Q[...], K[:, :, 2] = abs(Q) + 1, float(np.finfo(dtype).max)
    L = np.zeros((1, 1, 3, 5), dtype=dtype)
    L[..., 2] = -np.inf
    with np.errstate(over="ignore", invalid="ignore"):
        for trace in (None, {}):
            O = to_numpy(module.scaled_dot_product_attention(*arrays.put([Q, K, V, L]),
                                                             trace=trace))
            assert O.shape == (1, 2, 3, 4) and O.dtype == np.dtype(dtype)
            assert np.isnan(O).all(), ("traced" if trace is not None else "untraced", O)
