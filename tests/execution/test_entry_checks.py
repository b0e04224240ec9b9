"""The generated entry functions check their arguments against each other, whatever
TSPEC_TYPECHECK says (rt.entry): shapes the spec fixes, one float dtype for the parameters,
stacks of at least one layer, positive dims, the spec's constraints, finite positive settings.
Each case ran without error, or failed deep inside with another message, before the check."""

from typing import TypedDict

import numpy as np
import pytest
from jaxtyping import Bool, Float, Int
from support.arrays import BACKENDS
from support.specs import builtin_line

from tspec import api
from tspec.codegen.generate import source
from tspec.execution import weights
from tspec.generated.numpy import _runtime as rt

# lines of the built-in spec, found by their text
HEADS = builtin_line("require d_model % H == 0")


class LayerParams(TypedDict):
    gamma: Float[np.ndarray, " d_model"]
    W_Q: Float[np.ndarray, "d_model H*d_k"]


class ModelParams(TypedDict):
    E: Float[np.ndarray, "V d_model"]
    W_out: Float[np.ndarray, "d_model V"]
    layers: list[LayerParams]


RULES = {"lets": {"d_k": "d_model/H"}, "requires": {"d_model % H == 0": "m.tspec:4",
                                                    "T <= max_len": "m.tspec:5"}}


@rt.entry
def model(u: Int[np.ndarray, "B T"], m: Bool[np.ndarray, "B T"], params: ModelParams, *,
          H: int, eps: float = 1e-5) -> int:
    return 1


def arguments(V=11, d_model=8, N=2, dtype=np.float32):
    params = {"E": np.zeros((V, d_model), dtype), "W_out": np.zeros((d_model, V), dtype),
              "layers": [{"gamma": np.ones(d_model, dtype), "W_Q": np.zeros((d_model, d_model),
                                                                          dtype)}
                         for _ in range(N)]}
    return np.zeros((2, 5), np.int64), np.ones((2, 5), bool), params


def refusal(*args, **kwargs) -> str:
    with pytest.raises(ValueError) as raised:
        model(*args, **kwargs)
    return str(raised.value)


def test_arguments_that_fit_pass_through():
    assert model(*arguments(), H=2) == 1
    assert model(*arguments(dtype=np.float64), H=4, eps=1e-6) == 1


@pytest.mark.parametrize("spoil, message", [
    (lambda u, m, p: p["layers"][1].update(gamma=np.ones(1, np.float32)),
     ("model: params['layers'][1]['gamma'] axis 0 is 1, but d_model is 8 (from params['E'] "
     "axis 1)")),
    (lambda u, m, p: p["layers"][0].update(gamma=np.float32(1.0)),
     "model: params['layers'][0]['gamma'] is a float32, not a np.ndarray"),
    (lambda u, m, p: p.update(W_out=np.zeros((12, 11), np.float32)),
     "model: params['W_out'] axis 0 is 12, but d_model is 8 (from params['E'] axis 1)"),
    (lambda u, m, p: p.update(W_out=p["W_out"].astype(np.float64)),
     ("model: params['W_out'] is float64 but params['E'] is float32: give every parameter "
     "one dtype")),
    (lambda u, m, p: p.update(E=np.zeros((11, 8), np.int64)),
     "model: params['E'] is int64, not a float dtype"),
    (lambda u, m, p: p.update(layers=[]),
     "model: params['layers'] must be a non-empty list of layers, one dict each"),
    (lambda u, m, p: p["layers"][0].pop("W_Q"),
     "model: params['layers'][0]['W_Q'] is missing"),
    (lambda u, m, p: p["layers"][0].update(W_Q=np.zeros((8, 6), np.float32)),
     "model: params['layers'][0]['W_Q'] axis 1 is 6, but H*d_k is 8 (d_model H*d_k)"),
])
def test_parameters_that_do_not_fit_are_named(spoil, message):
    u, m, params = arguments()
    spoil(u, m, params)
    assert refusal(u, m, params, H=2) == message


def test_a_mask_that_would_broadcast_over_the_batch_is_refused():
    u, m, params = arguments()
    assert refusal(u, m[:1], params, H=2) == ("model: m axis 0 is 1, but B is 2 (from u "
                                              "axis 0)")


def test_ids_of_one_axis_are_refused():
    u, m, params = arguments()
    assert refusal(u[0], m, params, H=2) == "model: u has 1 axes, but its shape is B T (2)"


@pytest.mark.parametrize("H, message", [
    (3, "model: the arguments break `require d_model % H == 0` (H=3, d_model=8; m.tspec:4)"),
    (0, "model: H = 0: a dim must be an integer >= 1"),
    (-2, "model: H = -2: a dim must be an integer >= 1"),
    (2.0, "model: H = 2.0: a dim must be an integer >= 1"),
])
def test_keyword_dims_are_checked_before_anything_divides_by_them(H, message):
    assert refusal(*arguments(), H=H) == message


@pytest.mark.parametrize("eps", [-1.0, 0.0, float("nan"), float("inf"), "1e-5", True])
def test_settings_must_be_finite_and_positive(eps):
    assert refusal(*arguments(), H=2, eps=eps) == (
        f"model: eps = {eps!r}: a setting must be a finite number > 0")


# ---------------------------------------------------------------------------------------------
# The cases of issue 23 on a generated model, NumPy and the CuPy rendering: each ran without
# error, or failed deep inside with another message, before the entry check

GPT2 = {"arch": "decoder_only", "norm": "pre", "activation": "gelu_tanh",
        "positional": "learned", "attention_bias": "all", "output_embedding": "separate"}
SIZES = {"d_model": 8, "H": 2, "d_ff": 12, "N": 2, "V": 11, "max_len": 12}


def gpt2(arrays):
    spec = api.read_spec(api.BUILTIN_SPEC)
    module = arrays.load(source(spec, GPT2, arrays.backend))
    flat = weights.random_params(weights.expected_shapes(spec, GPT2, SIZES), 0, np.float32)
    u = np.random.default_rng(1).integers(0, 11, (2, 5))
    return module, weights.nest(weights.flatten(flat)), u, np.ones((2, 5), dtype=bool)


def spoiled(params, path, value):
    *inner, last = path
    for key in inner:
        params = params[key]
    params[last] = value(params[last]) if callable(value) else value


LAYER = ("decoder", "layers", 1)
CASES = {
    "a gain of one entry": (LAYER + ("norm_1", "gamma"), lambda g: g[:1],
                            ("params['decoder']['layers'][1]['norm_1']['gamma'] axis 0 is 1, "
                            "but d_model is 8 (from params['E'] axis 1)")),
    "a scalar gain": (LAYER + ("norm_1", "gamma"), lambda g: g[0],
                      ("params['decoder']['layers'][1]['norm_1']['gamma'] is a float32, not "
                      "a np.ndarray")),
    "W_out of 12 rows for E's 11": (("W_out",), np.zeros((8, 12), np.float32),
                                    ("params['W_out'] axis 1 is 12, but V is 11 (from "
                                    "params['E'] axis 0)")),
    "float32 and float64": (LAYER + ("feed_forward", "W_1"), lambda w: w.astype(np.float64),
                            ("params['decoder']['layers'][1]['feed_forward']['W_1'] is float64 "
                            "but params['E'] is float32: give every parameter one dtype")),
    "integer weights": (("E",), lambda e: e.astype(np.int64),
                        "params['E'] is int64, not a float dtype"),
    "no layers": (("decoder", "layers"), [],
                  ("params['decoder']['layers'] must be a non-empty list of layers, one dict "
                  "each")),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("arrays", BACKENDS)
def test_parameters_that_do_not_fit_the_spec_are_refused_at_the_entry(arrays, case):
    module, params, u, m = gpt2(arrays)
    path, value, message = CASES[case]
    spoiled(params, path, value)
    if arrays.backend == "cupy":
        message = message.replace("np.ndarray", "cp.ndarray")
    with pytest.raises(ValueError) as raised:
        module.transformer(*arrays.put((u, m, params)), H=2)
    assert str(raised.value) == f"transformer: {message}"


@pytest.mark.parametrize("arguments, message", [
    (lambda u, m: (u, m[:1]), "m_tgt axis 0 is 1, but B is 2 (from u axis 0)"),
    (lambda u, m: (u[0], m), "u has 1 axes, but its shape is B T_dec (2)"),
], ids=["a mask of one row for two sequences", "ids of one axis"])
@pytest.mark.parametrize("arrays", BACKENDS)
def test_inputs_that_do_not_fit_each_other_are_refused(arrays, arguments, message):
    module, params, u, m = gpt2(arrays)
    with pytest.raises(ValueError) as raised:
        module.transformer(*arrays.put((*arguments(u, m), params)), H=2)
    assert str(raised.value) == f"transformer: {message}"


@pytest.mark.parametrize("keywords, message", [
    ({"H": 3}, ("the arguments break `require d_model % H == 0` (H=3, d_model=8; "
               f"spec/transformer.tspec:{HEADS})")),
    ({"H": 0}, "H = 0: a dim must be an integer >= 1"),
    ({"H": 2, "eps": -1.0}, "eps = -1.0: a setting must be a finite number > 0"),
    ({"H": 2, "eps": float("nan")}, "eps = nan: a setting must be a finite number > 0"),
])
@pytest.mark.parametrize("arrays", BACKENDS)
def test_keywords_outside_the_spec_are_refused(arrays, keywords, message):
    module, params, u, m = gpt2(arrays)
    with pytest.raises(ValueError) as raised:
        module.transformer(*arrays.put((u, m, params)), **keywords)
    assert str(raised.value) == f"transformer: {message}"
    module.transformer(*arrays.put((u, m, params)), H=2)
