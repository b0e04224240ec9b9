"""Numerical edge cases of the generated code, on every backend that can run here.

Each test pins the defined result (README.md, "Numerical edge cases"; the helpers' docstrings)
and fails without the protection that gives it:

- an empty batch (B = 0); one position (T = 1), and decoding one position after a prompt of
  one position or of none.

The models are the committed generated modules (generated/<backend>/<model>.py) at small sizes
with seeded random weights. The CuPy cases need CuPy and a GPU, and skip saying why without
them (as in CI).
"""

import functools
import importlib
import inspect

import numpy as np
import pytest
from arrays import CUPY, NUMPY, needs_cupy, to_numpy
from compare import assert_close, flat

from codegen import weights
from codegen.generate import BUILTIN_MODELS
from spec import api

SPEC = api.read_spec(api.BUILTIN_SPEC)
MODELS = list(BUILTIN_MODELS)        # encoder_decoder, encoder_only, decoder_only, bert, llama
DECODERS = ["encoder_decoder", "decoder_only", "llama"]           # the ones with decode_step
SIZES = {"d_model": 8, "H": 2, "H_kv": 1, "d_ff": 12, "N": 2, "V": 11, "V_type": 2,
         "max_len": 8}
BACKENDS = [pytest.param(NUMPY, id="numpy"), pytest.param(CUPY, id="cupy", marks=needs_cupy)]
BACKEND_FLOATS = [pytest.param(arrays, dtype, id=f"{arrays}-{dtype}", marks=marks)
                  for arrays, marks in ((NUMPY, ()), (CUPY, needs_cupy))
                  for dtype in ("float64", "float32", "float16")]


@functools.cache
def model(backend: str, name: str):
    """The committed generated module (imported only when asked: CuPy's needs a GPU)."""
    return importlib.import_module(f"generated.{backend}.{name}")


def params(arrays, name, dtype, seed=0):
    """Seeded random weights at SIZES."""
    shapes = weights.expected_shapes(SPEC, BUILTIN_MODELS[name], SIZES)
    flat_params = weights.flatten(weights.random_params(shapes, seed, np.float64))
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
    return {name: SIZES[name] for name, p in inspect.signature(function).parameters.items()
            if p.kind is p.KEYWORD_ONLY and p.default is p.empty}


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
    module = model(arrays.name, name)
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
    module = model(arrays.name, name)
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
    module = model(arrays.name, name)
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


