"""Attention's strategy in the NumPy runtime, rt.attend_in_blocks: the numbers the models
computed when each held the strategy itself, in a closure over query blocks, bit for bit."""

import numpy as np
import pytest

from tspec import api
from tspec.execution.loading import load_module

GENERATED = api.checkout() / "generated"


@pytest.fixture(scope="module")
def rt():
    return load_module(GENERATED / "numpy" / "encoder_only.py").rt


def in_a_closure(rt, Q, K, V, L, scale, side_by_side=True):
    """The blocks as generated models computed them before: the queries divided per block."""

    def query_block(rows: slice, keys: slice):
        S = Q[..., rows, :] / scale @ K[..., keys, :].swapaxes(-1, -2)
        S = rt.add_into(S, L[..., rows, keys])
        if S.dtype == np.float16:
            np.copyto(S, -np.inf, where=L[..., rows, keys] == -np.inf)
        return rt.softmax_matmul(S, V[..., keys, :])

    blocks = rt.in_parallel(query_block, rt.query_blocks(L, rt.QUERY_BLOCK))
    if side_by_side:
        return rt.join_query_blocks(blocks)
    return np.concatenate(blocks, axis=-2)


def masks(heads: int, T: int):
    causal = np.where(np.tri(T, dtype=bool), 0.0, -np.inf)[None, None].repeat(heads, 0)
    padded = np.zeros((heads, 2, T, T))
    padded[:, 1, :, T // 2:] = -np.inf
    hidden = padded.copy()
    hidden[:, 0] = -np.inf                                 # every key of a batch row masked
    return {"causal": np.broadcast_to(causal, (heads, 2, T, T)), "padded": padded,
            "hidden": hidden}


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("block", [2, 32])
@pytest.mark.parametrize("heads", [1, 3])
def test_attend_in_blocks_gives_the_numbers_of_the_blocks_in_the_model(rt, monkeypatch, dtype,
                                                                       block, heads):
    monkeypatch.setattr(rt, "QUERY_BLOCK", block)
    rng = np.random.default_rng(heads * block)
    T, d = 70, 8
    Q, K, V = (rng.standard_normal((heads, 2, T, d)).astype(dtype) * 3 for _ in range(3))
    for name, L in masks(3, T).items():
        L = L.astype(dtype)
        scale = np.sqrt(d)
        expected = in_a_closure(rt, Q, K, V, L, scale)
        np.testing.assert_array_equal(rt.attend_in_blocks(Q / scale, K, V, L), expected,
                                      err_msg=name)
        assert rt.attend_in_blocks(Q / scale, K, V, L).shape == (3, 2, T, d)
        flat = in_a_closure(rt, Q[0], K[0], V[0], L[0], scale, side_by_side=False)
        np.testing.assert_array_equal(
            rt.attend_in_blocks(Q[0] / scale, K[0], V[0], L[0], side_by_side=False), flat)


def test_attend_in_blocks_leaves_its_arguments_as_they_are(rt, monkeypatch):
    monkeypatch.setattr(rt, "QUERY_BLOCK", 2)
    rng = np.random.default_rng(5)
    Q, K, V = (rng.standard_normal((2, 1, 6, 4)) for _ in range(3))
    L = masks(2, 6)["padded"][:, :1].copy()
    given = [x.copy() for x in (Q, K, V, L)]
    rt.attend_in_blocks(Q, K, V, L)
    for before, after in zip(given, (Q, K, V, L)):
        np.testing.assert_array_equal(before, after)


def test_keep_masked_sets_float16_scores_past_range_back_to_minus_infinity(rt):
    L = np.array([[0.0, -np.inf, -np.inf]], dtype=np.float32)
    with np.errstate(invalid="ignore"):                    # inf + -inf: NaN, as in the model
        S = np.array([[np.inf, np.inf, 1.0]], dtype=np.float16) + L.astype(np.float16)
    assert np.isnan(S[0, 1])
    rt.keep_masked(S, L)
    np.testing.assert_array_equal(S, np.array([[np.inf, -np.inf, -np.inf]], np.float16))
    wide = np.array([[np.inf, np.nan]])
    rt.keep_masked(wide, np.array([[0.0, -np.inf]]))       # not float16: left as it is
    assert np.isnan(wide[0, 1])
