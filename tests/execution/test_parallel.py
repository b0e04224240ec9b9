"""The generated NumPy code's thread pool and its float32 exact-GELU fast path.

The thread pool (Backend.thread_pool) shares attention's query blocks, row chunks of the
weight products and pieces of the row-wise passes out among threads; these tests force every
one of those paths on small inputs (tiny pieces and blocks, a pool of three workers whatever
the machine) and require the same numbers as one thread.
"""

import dataclasses
import math
import threading

import numpy as np
import pytest
import scipy.special
from support.pools import on_a_pool

from tspec import api
from tspec.codegen import generate
from tspec.codegen.backends import backend
from tspec.codegen.generate import source
from tspec.codegen.lowering.lower import lower
from tspec.codegen.rendering.render import render, render_runtime
from tspec.execution import weights
from tspec.execution.loading import load_source

SPEC = api.read_spec(api.BUILTIN_SPEC)


def module(threads: int, typecheck: bool = False, **choices):
    """A fresh generated module with a runtime of its own, whose pool has ``threads`` workers
    (1: no pool), with pieces and blocks so small that every shared-out path runs on small
    inputs."""
    return on_a_pool(load_source(source(SPEC, choices), typecheck=typecheck, private=True),
                     threads)


def params(choices, dtype, **dims):
    sizes = {"d_model": 8, "H": 2, "d_ff": 12, "N": 2, "V": 11, "max_len": 16, **dims}
    return weights.random_params(weights.expected_shapes(SPEC, choices, sizes), 3, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("choices", [
    {"arch": "encoder_decoder"},
    {"arch": "encoder_decoder", "activation": "gelu", "attention_bias": "all"},
    {"arch": "decoder_only", "norm": "pre", "activation": "gelu_tanh", "attention_bias": "all"},
])
def test_threads_give_the_numbers_of_one_thread(choices, dtype):
    rng = np.random.default_rng(4)
    one, three = module(1, **choices), module(3, typecheck=True, **choices)
    weights_ = params(choices, dtype)
    if choices["arch"] == "encoder_decoder":
        keep = np.ones((3, 7), dtype=bool)
        keep[1, 4:] = False                      # padded keys: blocks of every kind
        inputs = (rng.integers(0, 11, (3, 7)), keep, rng.integers(0, 11, (3, 6)),
                  np.ones((3, 6), dtype=bool))
    else:
        inputs = (rng.integers(0, 11, (3, 9)), np.ones((3, 9), dtype=bool))
    expected = one.transformer(*inputs, weights_, H=2)
    got = three.transformer(*inputs, weights_, H=2)
    for ours, theirs in zip(got, expected):
        assert ours.dtype == dtype
        np.testing.assert_allclose(ours, theirs, rtol=1e-12 if dtype == np.float64 else 1e-5,
                                   atol=1e-14 if dtype == np.float64 else 1e-6)
    traced_one, traced_three = {}, {}
    one.transformer(*inputs, weights_, H=2, trace=traced_one)
    three.transformer(*inputs, weights_, H=2, trace=traced_three)
    layer = "encoder" if choices["arch"] == "encoder_decoder" else "decoder"
    attention_one = traced_one[layer]["layers"][1]["self_attention"]["attention"]
    attention_three = traced_three[layer]["layers"][1]["self_attention"]["attention"]
    assert list(attention_three) == ["S_h", "A_h", "O_h"]
    for name in attention_one:
        # float32 sums in another order (threads): scores near 0 differ by ~1e-7 absolute
        np.testing.assert_allclose(attention_three[name], attention_one[name],
                                   rtol=1e-12 if dtype == np.float64 else 1e-5,
                                   atol=1e-14 if dtype == np.float64 else 1e-6)


def test_in_parallel_keeps_the_order_and_runs_nested_work_in_place():
    loaded = module(3, attention_bias="all")
    threads = set()

    def inner(i):
        threads.add(threading.current_thread().name)
        return i * i

    def outer(i):
        # work shared out from inside shared-out work runs on the thread that asked for it
        name = threading.current_thread().name
        nested = loaded.rt.in_parallel(lambda j: (j, threading.current_thread().name),
                                    [(j,) for j in range(4)])
        assert [j for j, _ in nested] == [0, 1, 2, 3] and {n for _, n in nested} == {name}
        return inner(i)

    assert loaded.rt.in_parallel(outer, [(i,) for i in range(20)]) == [i * i for i in range(20)]
    assert loaded.rt.in_parallel(outer, []) == []
    with pytest.raises(ZeroDivisionError):
        loaded.rt.in_parallel(lambda i: 1 / i, [(i,) for i in range(-3, 4)])


def test_calls_from_several_threads_at_once_give_blas_its_thread_count_back():
    loaded = module(3, attention_bias="all")
    loaded.rt.start_threads()                # BLAS's control, which starts on first use
    before = [library["num_threads"] for library in loaded.rt.BLAS.info()]
    barrier = threading.Barrier(4)

    def caller():
        barrier.wait()
        for _ in range(50):
            loaded.rt.in_parallel(lambda i: np.ones((8, 8)) @ np.ones((8, 8)),
                               [(i,) for i in range(5)])

    callers = [threading.Thread(target=caller) for _ in range(4)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    assert [library["num_threads"] for library in loaded.rt.BLAS.info()] == before
    assert loaded.rt.BLAS_ON_ONE_THREAD.holders == 0


def test_row_wise_helpers_in_pieces_and_in_place_match_one_call():
    loaded = module(3, activation="gelu_tanh")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 7, 9))
    gamma, beta = rng.standard_normal(9), rng.standard_normal(9)
    for name, args in (("layer_norm", (gamma, beta, 1e-5)), ("softmax", ()),
                       ("gelu_tanh", ())):
        function = getattr(loaded.rt, name)
        whole = function.__wrapped__(x.copy(), *args)              # one call, no pieces
        np.testing.assert_allclose(function(x, *args), whole, rtol=1e-15, atol=1e-15)
        in_place = x.copy()
        assert function(in_place, *args, out=in_place) is not None
        np.testing.assert_allclose(in_place, whole, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(loaded.rt.softmax(x, axis=1),
                               np.exp(x) / np.exp(x).sum(axis=1, keepdims=True), rtol=1e-14)


def test_the_numpy_backend_alone_has_the_pool_and_the_float32_gelu():
    text = generate.runtime_source("numpy")
    assert "        from threadpoolctl import ThreadpoolController\n" in text   # on first use
    assert "@in_row_chunks\n" in text and "GELU_FLOAT32_P = (" in text
    cupy = generate.runtime_source("cupy")
    for name in ("ThreadPoolExecutor", "threadpoolctl", "in_row_chunks", "GELU_FLOAT32",
                 "BLAS_ON_ONE_THREAD"):
        assert name not in cupy, name
    assert "\ndef in_parallel(" not in cupy                    # nothing of CuPy calls it
    assert "GELU_KERNEL = cp.ElementwiseKernel(" in cupy         # CuPy's own exact GELU


def normal_cdf_error(gelu, x):
    """The largest error of gelu(x) / x as Phi(x), against float64 x * ndtr(x), in units of
    2^-24 (half float32's spacing just below 1)."""
    exact = x.astype(np.float64) * scipy.special.ndtr(x.astype(np.float64))
    error = np.abs(gelu(x).astype(np.float64) - exact)
    return (error / np.maximum(np.abs(x.astype(np.float64)), 1e-300)).max() / 2.0 ** -24


def test_float32_exact_gelu_is_as_exact_as_float32_erf():
    """The float32 fast path (a fitted polynomial under tanh, no erf) gives Phi(x) = GELU(x)/x
    within 3 x 2^-24 of the normal CDF for every float32 x tried: a fine grid over [-40, 40]
    and magnitudes from 1e-30 to 1e30 of both signs (the tails, where Phi is 0 or 1 to float32
    precision). Computing x / 2 (1 + erf(x / sqrt 2)) in float32 with scipy's erf does no
    better than 2 x 2^-24."""
    gelu = module(1, activation="gelu").rt.gelu
    grid = np.concatenate([np.linspace(-40, 40, 800_001), -np.logspace(-30, 30, 6001),
                           np.logspace(-30, 30, 6001), [0.0, -0.0]]).astype(np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):   # no warnings
        result = gelu(grid)
    assert result.dtype == np.float32 and np.isfinite(result).all()
    assert normal_cdf_error(gelu, grid) <= 3.0
    float32_erf = normal_cdf_error(
        lambda v: 0.5 * v * (1 + scipy.special.erf(v * np.float32(1 / math.sqrt(2)))), grid)
    assert 1.0 <= float32_erf <= 2.0
    assert gelu(np.float32([1e-30]))[0] == np.float32(0.5e-30)    # x / 2 near zero
    assert np.isnan(gelu(np.float32([np.nan]))).all()


def test_float64_exact_gelu_is_erf():
    gelu = module(1, activation="gelu").rt.gelu
    x = np.concatenate([np.linspace(-12, 12, 2001), [-40.0, 40.0]])
    erf = scipy.special.erf(x * (1.0 / math.sqrt(2.0)))
    np.testing.assert_array_equal(gelu(x), 0.5 * x * (1.0 + erf))    # as before the fast path
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(gelu(x), exact, rtol=1e-13, atol=1e-16)


@pytest.mark.parametrize("choices", [
    {"arch": "encoder_decoder", "activation": "gelu", "attention_bias": "all"},
    {"arch": "decoder_only", "norm": "pre", "activation": "gelu_tanh"},
])
def test_the_templates_without_the_pool_give_the_same_numbers(choices):
    """The templates' branches for a backend without a thread pool or the float32 GELU (as
    CuPy's row has), rendered for NumPy so that they run here: the same numbers."""
    plain = dataclasses.replace(backend("numpy"), thread_pool=False, float32_gelu=False)
    text = render(lower(SPEC, choices, plain))
    runtime = render_runtime(plain)
    assert "ThreadPoolExecutor" not in runtime and "GELU_FLOAT32" not in runtime
    stand_in = load_source(text, typecheck=True, private=True)
    numpy_module = module(3, **choices)
    assert stand_in.rt.__file__.endswith("_runtime.py") and stand_in.rt.VERSION != \
        numpy_module.rt.VERSION
    stand_in.rt.QUERY_BLOCK = 2
    rng = np.random.default_rng(6)
    for dtype in (np.float64, np.float32):
        weights_ = params(choices, dtype)
        if choices["arch"] == "encoder_decoder":
            inputs = (rng.integers(0, 11, (2, 5)), np.ones((2, 5), dtype=bool),
                      rng.integers(0, 11, (2, 4)), np.ones((2, 4), dtype=bool))
        else:
            inputs = (rng.integers(0, 11, (2, 7)), np.ones((2, 7), dtype=bool))
        for ours, theirs in zip(stand_in.transformer(*inputs, weights_, H=2),
                                numpy_module.transformer(*inputs, weights_, H=2)):
            np.testing.assert_allclose(ours, theirs, rtol=1e-12 if dtype == np.float64 else 1e-5,
                                       atol=1e-14 if dtype == np.float64 else 1e-6)
