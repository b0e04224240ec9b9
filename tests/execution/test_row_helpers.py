"""The generated row-wise helpers against float64 references, called every way a caller may.

softmax, layer_norm, rms_norm and the activations (relu, gelu, gelu_tanh, silu) take their
arguments by position or by keyword, softmax any axis of a 1-D to 4-D array (a negative one
counted from the end), and ``out`` absent, the argument itself, another array or a
non-contiguous one; the argument may be non-contiguous or empty, float16, float32 or float64.
On NumPy each runs in one call and in pieces of rows on a pool of three workers (pieces of 16
elements: in_row_chunks), and as the templates render for a backend without the pool or the
float32 GELU (CuPy's branches, run here); on CuPy (where a GPU is) through its kernels. Every
result is compared with float64 NumPy written from the formulas; an axis that does not exist
is a one-line error naming the helper. A spec's softmax over any axis gives the same numbers
through its generated forward, and attention without a trace the traced one's.
"""

import ast
import dataclasses
import functools
import inspect
import math
import warnings

import numpy as np
import pytest
import scipy.special
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import reference_numpy
from support.arrays import CUPY, CUPY_ON_CPU, DEVICES, MARKS, NUMPY, to_numpy
from support.compare import assert_close
from support.pools import on_a_pool
from support.refusals import raises

from tspec import api
from tspec.codegen.backends import backend as backend_named
from tspec.codegen.generate import runtime_source, source
from tspec.codegen.lowering.lower import lower
from tspec.codegen.rendering.render import render
from tspec.execution.loading import load_source
from tspec.language.parser import parse

SPEC = api.read_spec(api.BUILTIN_SPEC)
# the built-in spec's choices under which a generated module has each helper
CHOICES = {"softmax": {}, "layer_norm": {}, "relu": {}, "gelu": {"activation": "gelu"},
           "gelu_tanh": {"activation": "gelu_tanh"}, "silu": {"activation": "swiglu"},
           "rms_norm": {"normalization": "rms_norm"}}
FLOATS = ["float64", "float32", "float16"]
TOLERANCES = {"float64": 1e-12, "float32": 5e-5, "float16": 1e-2}  # of max(1, |reference|)
EPS = 1e-3


def references(name, x, gamma=None, beta=None, axis=-1):
    """The helper's result in float64, from the formula (x already in float64)."""
    if x.size == 0:
        return x.copy()
    if name == "softmax":
        return reference_numpy.softmax(x, axis)
    if name == "layer_norm":
        return reference_numpy.layer_norm(x, {"gamma": gamma, "beta": beta}, EPS)
    if name == "rms_norm":
        return reference_numpy.rms_norm(x, {"gamma": gamma}, EPS)
    if name == "silu":
        return x * scipy.special.expit(x)
    return reference_numpy.activation(x, name)


@functools.cache
def generated(backend: str, helper: str, pieces: bool):
    """A module that has the helper, for NumPy on a pool of three workers where ``pieces``;
    backend "plain": the templates' branches for a backend without the pool or the float32
    GELU, rendered for NumPy."""
    if backend == "plain":
        plain = dataclasses.replace(backend_named("numpy"), thread_pool=False,
                                    float32_gelu=False)
        return load_source(render(lower(SPEC, CHOICES[helper], plain)))
    if backend in ("cupy", "cupy-on-cpu"):
        arrays = CUPY if backend == "cupy" else CUPY_ON_CPU
        return arrays.load(source(SPEC, CHOICES[helper], "cupy"))
    if pieces:
        return on_a_pool(load_source(source(SPEC, CHOICES[helper], backend), private=True), 3)
    return load_source(source(SPEC, CHOICES[helper], backend))


class Implementation:
    """One way a helper runs: NumPy in pieces on a pool, NumPy in one call, the templates'
    branches for a backend without the pool rendered for NumPy, or CuPy (on a GPU, or on the
    CPU through the stand-in)."""

    def __init__(self, name: str, arrays, pieces: bool, backend: str = "numpy"):
        self.name, self.arrays, self.pieces = name, arrays, pieces
        self.backend = backend if arrays is NUMPY else arrays.name
        self.xp = arrays.xp

    def module(self, helper: str):
        return generated(self.backend, helper, self.pieces)

    def helper(self, name: str):
        function = getattr(self.module(name).rt, name)
        if self.backend == "numpy" and not self.pieces:
            return function.__wrapped__              # the helper itself: one call, no pieces
        return function

    def __repr__(self):
        return self.name


IMPLEMENTATIONS = [
    pytest.param(Implementation("numpy-pieces", NUMPY, True), id="numpy-pieces"),
    pytest.param(Implementation("numpy-one-call", NUMPY, False), id="numpy-one-call"),
    pytest.param(Implementation("numpy-plain", NUMPY, False, "plain"), id="numpy-plain"),
    *(pytest.param(Implementation(arrays.name, arrays, False), id=arrays.name,
                   marks=MARKS[arrays]) for arrays in (CUPY, CUPY_ON_CPU)),
]


def laid_out(xp, values: np.ndarray, how: str):
    """``values`` as an array of xp: C-contiguous, Fortran order (so not C-contiguous where it
    has two axes of 2 or more), or every other element of a larger array."""
    if how == "strided":
        wide = xp.zeros(values.shape + (2,), dtype=values.dtype)
        wide[..., 0] = xp.asarray(values)
        return wide[..., 0]
    return xp.array(values, order="F" if how == "fortran" else "C")  # a copy


def call(function, arguments: dict, by_position: int):
    """function(...), the first ``by_position`` arguments (in the helper's order) by position,
    the rest by keyword."""
    names = list(arguments)
    return function(*(arguments[n] for n in names[:by_position]),
                    **{n: arguments[n] for n in names[by_position:]})


@st.composite
def cases(draw, helper: str):
    """A helper's call: shape (1-D to 4-D, axes of 0 to 5), axis, dtype, layouts, out and
    how many arguments go by position."""
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=4)))
    rank = len(shape)
    axis = draw(st.integers(-rank, rank - 1)) if helper == "softmax" else None
    return {"shape": shape, "axis": axis, "dtype": draw(st.sampled_from(FLOATS)),
            "layout": draw(st.sampled_from(["contiguous", "fortran", "strided"])),
            "out": draw(st.sampled_from([None, "x", "contiguous", "fortran", "strided"])),
            "seed": draw(st.integers(0, 2 ** 16)), "by_position": draw(st.integers(0, 5))}


def check_helper(implementation, helper: str, case: dict) -> None:
    rng = np.random.default_rng(case["seed"])
    dtype, shape = case["dtype"], case["shape"]
    xp = implementation.xp
    values = (rng.standard_normal(shape) * 3).astype(dtype)
    x = laid_out(xp, values, case["layout"])
    arguments = {"x": x}
    gamma = beta = None
    if helper in ("layer_norm", "rms_norm"):
        gamma = rng.standard_normal(shape[-1:]).astype(dtype)
        arguments["gamma"] = xp.asarray(gamma)
        if helper == "layer_norm":
            beta = rng.standard_normal(shape[-1:]).astype(dtype)
            arguments["beta"] = xp.asarray(beta)
        arguments["eps"] = EPS
    if helper == "softmax":
        arguments["axis"] = case["axis"]
    out = None
    if case["out"] == "x":
        out = x
    elif case["out"] is not None:
        out = laid_out(xp, np.zeros(shape, dtype), case["out"])
    if out is not None:
        arguments["out"] = out
    function = implementation.helper(helper)
    assert list(arguments) == list(inspect.signature(function).parameters)[:len(arguments)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # the mean of a row of width 0
        result = call(function, arguments, min(case["by_position"], len(arguments)))
        expected = references(helper, values.astype(np.float64),
                              None if gamma is None else gamma.astype(np.float64),
                              None if beta is None else beta.astype(np.float64),
                              -1 if case["axis"] is None else case["axis"])
    assert result.shape == shape and result.dtype == np.dtype(dtype)
    if out is not None:
        assert result is out
    if out is not x:
        np.testing.assert_array_equal(to_numpy(x), values)             # x left as it was
    assert_close({helper: result}, {helper: expected}, dtype, TOLERANCES[dtype])


HELPERS = list(CHOICES)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("helper", HELPERS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_row_wise_helpers_give_the_float64_numbers_called_any_way(implementation, helper, data):
    check_helper(implementation, helper, data.draw(cases(helper)))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("by_position", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_softmax_of_a_3d_float32_array_along_each_axis(implementation, axis, by_position):
    """The issue's cases: softmax(x, 0), (x, 1), (x, -2) gave numbers off by up to 0.62 (0.51
    here) in pieces (the axis, by position, went to each 2-D piece unchanged), and
    softmax(x, axis=2) raised AxisError for the pieces' two axes."""
    case = {"shape": (3, 4, 5), "axis": axis, "dtype": "float32", "layout": "contiguous",
            "out": None, "seed": 7, "by_position": by_position}
    check_helper(implementation, "softmax", case)


def test_only_the_last_axis_goes_in_pieces(monkeypatch):
    """softmax along the last axis, however it is named, runs in pieces; along another, in one
    call (pieces of rows would cut across what it sums)."""
    module = Implementation("numpy-pieces", NUMPY, True).module("softmax")
    pieces = []
    real = module.rt.in_parallel
    monkeypatch.setattr(module.rt, "in_parallel", lambda f, items: pieces.append(len(items)) or
                        real(f, items))
    x = np.random.default_rng(0).standard_normal((3, 4, 5))
    for arguments, kwargs in [((x,), {}), ((x, 2), {}), ((x, -1), {}), ((x,), {"axis": 2}),
                              ((), {"x": x, "axis": np.int64(-1)}),
                              ((x, 2, np.empty_like(x)), {})]:
        pieces.clear()
        module.rt.softmax(*arguments, **kwargs)
        assert pieces == [4], (arguments, kwargs)               # 12 rows of 5, 3 to a piece
    for arguments, kwargs in [((x, 0), {}), ((x, 1), {}), ((x,), {"axis": -2}),
                              ((x, -1, np.empty((4, 3, 5)).transpose(1, 0, 2)), {}),
                              ((x[0, 0],), {})]:
        pieces.clear()
        module.rt.softmax(*arguments, **kwargs)
        assert pieces == [], (arguments, kwargs)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("axis, error", [
    (3, (ValueError, "softmax: axis 3 does not exist in an array of shape (3, 4, 5)")),
    (-4, (ValueError, "softmax: axis -4 does not exist in an array of shape (3, 4, 5)")),
    (None, (TypeError, "softmax: axis must be an integer, got None")),
    ((0, 1), (TypeError, "softmax: axis must be an integer, got (0, 1)")),
    (1.0, (TypeError, "softmax: axis must be an integer, got 1.0")),
    (True, (TypeError, "softmax: axis must be an integer, got True")),
])
def test_an_axis_that_does_not_exist_is_a_clear_error(implementation, axis, error):
    """Not NumPy's softmax over every axis (None) or several (a tuple), nor its AxisError
    from a reduction inside, nor an index error in a kernel."""
    x = implementation.xp.ones((3, 4, 5), dtype=np.float32)
    softmax = implementation.helper("softmax")
    with raises(*error):
        softmax(x, axis)
    with raises(*error):
        softmax(x, axis=axis)
    with raises(ValueError, "softmax: axis -1 does not exist in an array of shape ()"):
        softmax(implementation.xp.ones((), dtype=np.float32))


@pytest.mark.parametrize("helper", ["softmax", "layer_norm", "gelu"])
@pytest.mark.parametrize("shift", [1, -1])
def test_an_out_that_overlaps_the_argument_gets_the_numbers_of_one_call(helper, shift):
    """out and x views of one buffer, a row apart: pieces written into out would overwrite
    rows of x another piece has yet to read, so such an out goes in one call, which NumPy
    computes as if x were copied first."""
    implementation = Implementation("numpy-pieces", NUMPY, True)
    rng = np.random.default_rng(3)
    rows, width = 40, 6
    buffer = rng.standard_normal((rows + 1) * width)
    x, out = buffer[width:], buffer[:-width]
    if shift < 0:
        x, out = out, x
    x, out = x.reshape(rows, width), out.reshape(rows, width)
    values = x.copy()
    arguments = (np.ones(width), np.zeros(width), EPS) if helper == "layer_norm" else ()
    assert implementation.helper(helper)(x, *arguments, out=out) is out
    expected = references(helper, values, np.ones(width), np.zeros(width))
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("helper", HELPERS)
def test_an_integer_argument_goes_in_one_call(helper):
    """Integers are outside the helpers' float contract (TSPEC_TYPECHECK=1 refuses them); in
    pieces they get what the helper alone gives, its result or its error. Pieces of x's dtype
    made an integer array of rms_norm's and gelu's float64 results, and failed."""
    implementation = Implementation("numpy-pieces", NUMPY, True)
    x = np.arange(-30, 30).reshape(6, 10)
    others = {"layer_norm": (np.ones(10), np.zeros(10), EPS), "rms_norm": (np.ones(10), EPS)}
    arguments = (x, *others.get(helper, ()))
    whole, pieces = (implementation.helper(helper).__wrapped__, implementation.helper(helper))
    try:
        expected = whole(*arguments)
    except Exception as error:  # noqa: BLE001 - whatever the helper raises, pieces must too
        with raises(type(error), str(error)):
            pieces(*arguments)
    else:
        got = pieces(*arguments)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


def signatures(backend: str) -> dict[str, list]:
    """Each row-wise helper's parameters, with their defaults, as the backend's runtime has
    it."""
    found = {}
    tree = ast.parse(runtime_source(backend))
    for helper in CHOICES:
        function = next(node for node in tree.body
                        if isinstance(node, ast.FunctionDef) and node.name == helper)
        defaults = [None] * (len(function.args.args) - len(function.args.defaults)) + [
            ast.unparse(d) for d in function.args.defaults]
        found[helper] = [(a.arg, d) for a, d in zip(function.args.args, defaults)]
    return found


def test_each_helper_takes_the_same_arguments_on_numpy_and_cupy():
    """Code written against one backend's helpers runs on the other's: CuPy's softmax and
    layer_norm take ``out`` as NumPy's do."""
    numpy_helpers = signatures("numpy")
    assert numpy_helpers["softmax"] == [("x", None), ("axis", "-1"), ("out", "None")]
    assert numpy_helpers["layer_norm"] == [("x", None), ("gamma", None), ("beta", None),
                                           ("eps", None), ("out", "None"),
                                           ("residual", "None"), ("total", "None")]
    assert signatures("cupy") == numpy_helpers


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_a_gated_product_has_the_numbers_of_its_two_passes(implementation, dtype):
    """glu(g, x, silu) is silu(g) * x exactly, on every backend (one kernel on CuPy, in place
    on NumPy), written into g's array; operands of two shapes run as written."""
    rng = np.random.default_rng(4)
    g = (rng.standard_normal((4, 6, 33)) * 4).astype(dtype)
    x = (rng.standard_normal((4, 6, 33)) * 3).astype(dtype)
    xp, rt = implementation.xp, implementation.module("silu").rt
    expected = to_numpy(rt.silu(xp.asarray(g))) * x
    gate = xp.asarray(g)
    y = rt.glu(gate, xp.asarray(x), rt.silu)
    assert y is gate and y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(to_numpy(y), expected)
    row = rt.glu(xp.asarray(g), xp.asarray(x[0, 0]), rt.silu)
    np.testing.assert_array_equal(to_numpy(row), to_numpy(rt.silu(xp.asarray(g))) * x[0, 0])


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("helper", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_a_norm_with_a_residual_normalises_the_sum_and_writes_it_to_total(implementation,
                                                                          helper, dtype):
    """norm(x, ..., residual=r, total=t): the numbers of norm(x + r, ...), t = x + r in the
    dtype, on every backend (CuPy adds r in its kernel; NumPy adds it, then runs in pieces);
    into ``out`` too; total alone gets x."""
    rng = np.random.default_rng(len(helper))
    x = (rng.standard_normal((5, 7, 33)) * 3).astype(dtype)
    r = (rng.standard_normal((5, 7, 33)) * 2).astype(dtype)
    weights = [rng.standard_normal(33).astype(dtype)
               for _ in range(2 if helper == "layer_norm" else 1)]
    xp, rt = implementation.xp, implementation.module(helper).rt
    norm = getattr(rt, helper)
    on = [xp.asarray(w) for w in weights]
    expected = to_numpy(norm(xp.asarray(x + r), *on, EPS))
    total, out = xp.zeros(x.shape, dtype=dtype), xp.zeros(x.shape, dtype=dtype)
    y = norm(xp.asarray(x), *on, EPS, residual=xp.asarray(r), total=total)
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(to_numpy(total), x + r)
    tolerance = TOLERANCES[dtype] * max(1.0, np.abs(expected.astype(np.float64)).max())
    np.testing.assert_allclose(to_numpy(y).astype(np.float64), expected.astype(np.float64),
                               rtol=0, atol=tolerance)
    assert norm(xp.asarray(x), *on, EPS, out=out, residual=xp.asarray(r)) is out
    np.testing.assert_allclose(to_numpy(out).astype(np.float64), expected.astype(np.float64),
                               rtol=0, atol=tolerance)
    norm(xp.asarray(x), *on, EPS, total=total)
    np.testing.assert_array_equal(to_numpy(total), x)


# ---------------------------------------------------------------------------------------------
# A spec's softmax over each axis, through its generated forward

AXES = ('dim B "batch"\ndim T "positions"\ndim d "width"\ndim H "heads"\n'
        'block along_rows(Y "B T d") -> Z:\n'
        '    Z "B T d" = softmax(Y, axis=1)\n'
        'input X "B T d"\ninput S_h[H] "B T d"\n'
        + "".join(f'A_{n} "B T d" = softmax(X, axis={a})\n'
                  for n, a in (("0", 0), ("1", 1), ("2", 2), ("m1", -1), ("m2", -2),
                               ("m3", -3)))
        + "".join(f'F_{n}[H] "B T d" = softmax(S_h, axis={a})\n'
                  for n, a in (("0", 0), ("2", 2), ("m1", -1), ("m3", -3)))
        + 'C "B T d" = along_rows(X)\n'
        'output A_0, A_1, A_2, A_m1, A_m2, A_m3, F_0, F_2, F_m1, F_m3, C\n')


@pytest.mark.parametrize("arrays, dtype", [
    (NUMPY, "float64"), (NUMPY, "float32"),
    *(pytest.param(arrays, dtype, id=f"{arrays}-{dtype}", marks=MARKS[arrays])
      for arrays in (CUPY, CUPY_ON_CPU) for dtype in ("float32", "float16"))])
def test_a_spec_softmax_over_any_axis_gives_the_float64_numbers(arrays, dtype):
    """softmax(X, axis=k) for every axis of a "B T d" tensor, positive and negative, of a
    family (whose axis 0 is B, the family axis before it), and inside a block: the generated
    forward gives float64's softmax along that axis (axis=2, the last written as positive,
    raised AxisError in pieces; 0, 1 and -2 gave wrong numbers)."""
    text = source(parse(AXES, file="axes.tspec"), {}, arrays.backend)
    assert "A_2 = rt.softmax(X, axis=2)" in text and "F_0 = rt.softmax(S_h, axis=1)" in text
    module = arrays.load(text, private=True)
    if arrays is NUMPY:
        on_a_pool(module, 3)
    rng = np.random.default_rng(11)
    X = (rng.standard_normal((3, 4, 5)) * 3).astype(dtype)
    S = (rng.standard_normal((2, 3, 4, 5)) * 3).astype(dtype)          # H = 2 members
    outputs = module.axes(arrays.put(X), arrays.put(S))
    wide, wide_S = X.astype(np.float64), S.astype(np.float64)
    expected = [reference_numpy.softmax(wide, a) for a in (0, 1, 2, -1, -2, -3)]
    expected += [reference_numpy.softmax(wide_S, a) for a in (1, 3, -1, -3)]
    expected.append(reference_numpy.softmax(wide, 1))
    names = [f"output {i}" for i in range(len(expected))]
    assert [o.dtype for o in outputs] == [np.dtype(dtype)] * len(expected)
    assert_close(dict(zip(names, outputs)), dict(zip(names, expected)), dtype,
                 TOLERANCES[dtype])


def test_silu_is_exact_to_a_few_roundings_of_its_dtype():
    """silu(x) = x * sigmoid(x) within a few roundings of float64's, relative to itself, over
    the whole range: in the negative tail too, where 1 + tanh(x / 2) lost every digit
    (float32 silu(-20) was -6e-7 or 0 for -4.1e-8), and float16 computed in float32 and
    rounded once."""
    silu = Implementation("numpy-pieces", NUMPY, True).helper("silu")
    for dtype, roundings in (("float64", 6), ("float32", 6), ("float16", 1.01)):
        finfo = np.finfo(dtype)
        top = math.log(float(finfo.max)) / 2
        x = np.concatenate([np.linspace(-top, top, 20001), [0.0, -0.0]]).astype(dtype)
        wide = x.astype(np.float64)
        exact = wide * scipy.special.expit(wide)
        got = silu(x)
        assert got.dtype == np.dtype(dtype)
        normal = np.abs(exact) >= finfo.smallest_normal
        error = np.abs(got.astype(np.float64) - exact)[normal] / np.abs(exact[normal])
        assert error.max() <= roundings * finfo.eps / 2, (dtype, error.max())


@pytest.mark.parametrize("arrays", [NUMPY, *DEVICES])
@pytest.mark.parametrize("q, v, mask", [("float16", "float16", "float16"),
                                        ("float16", "float32", "float16"),
                                        ("float16", "float16", "float32"),
                                        ("float32", "float64", "float32"),
                                        ("float64", "float64", "float64")])
def test_attention_without_a_trace_has_the_shape_dtype_and_numbers_of_the_traced(arrays, q, v,
                                                                                  mask):
    """softmax(Q K^T / sqrt(d_k) + L) @ V for one head's queries, keys and values and a mask
    for three heads, in mixed dtypes: without a trace (NumPy's softmax_matmul, CuPy's
    masked_softmax) the result has the traced one's dtype, that of the equations as written,
    and three heads. softmax_matmul rounded a float16 S's product to float16 whatever V's
    dtype, and masked_softmax took X's shape and dtype, so CuPy refused a mask with more heads
    than the scores and gave float16 weights for float16 scores and a float32 mask."""
    module = arrays.committed("encoder_only")
    rng = np.random.default_rng(5)
    Q, K = (rng.standard_normal((1, 2, 5, 4)).astype(q) for _ in range(2))
    V = rng.standard_normal((1, 2, 5, 4)).astype(v)
    L = np.where(rng.random((3, 2, 5, 5)) < 0.3, -np.inf, 0.0).astype(mask)
    L[..., 0] = 0.0                                        # every query sees a key
    wide = [x.astype(np.float64) for x in (Q, K, V, L)]
    expected = reference_numpy.softmax(wide[0] @ wide[1].swapaxes(-1, -2) / 2 + wide[3]) @ wide[2]
    dtype = np.result_type(Q, K, L, V)
    narrow = min((q, v, mask), key=lambda name: np.dtype(name).itemsize)
    for trace in (None, {}):
        O = module.scaled_dot_product_attention(*arrays.put([Q, K, V, L]), trace=trace)
        assert O.shape == (3, 2, 5, 4) and O.dtype == dtype, (trace, O.shape, O.dtype)
        assert_close({"O_h": O}, {"O_h": expected}, narrow, TOLERANCES[narrow])
