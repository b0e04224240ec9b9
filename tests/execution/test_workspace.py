"""The generated NumPy code's workspace: large temporaries come from buffers kept between
calls, handed out again only once no array refers to them."""

import threading

import numpy as np
import pytest

from tspec import api
from tspec.execution.loading import load_module
from tspec.execution.run import _keywords, _prepare, with_run_defaults

GENERATED = api.SPEC_DIR.parent / "generated" / "numpy"


@pytest.fixture
def runtime():
    """A runtime of its own: nothing kept yet."""
    return load_module(GENERATED / "encoder_only.py", private=True).rt


SHAPE = (512, 256)                         # 512 KiB of float32: kept


def address(array) -> int:
    return array.__array_interface__["data"][0]


def test_a_buffer_no_array_refers_to_is_handed_out_again(runtime):
    first = runtime.workspace(SHAPE, np.float32)
    where = address(first)
    del first
    again = runtime.workspace(SHAPE, np.float32)
    assert address(again) == where
    assert again.shape == SHAPE and again.dtype == np.float32 and again.flags.writeable


def test_a_buffer_an_array_or_a_view_still_uses_is_not(runtime):
    first = runtime.workspace(SHAPE, np.float32)
    second = runtime.workspace(SHAPE, np.float32)
    assert not np.shares_memory(first, second)
    rows = first[3:7].reshape(-1)          # a view of a view: it keeps the buffer too
    del first
    third = runtime.workspace(SHAPE, np.float32)
    assert not np.shares_memory(rows, third) and not np.shares_memory(second, third)
    del rows
    fourth = runtime.workspace(SHAPE, np.float32)
    del third
    assert len(runtime.WORKSPACE[SHAPE[0] * SHAPE[1] * 4]) == 3
    assert not np.shares_memory(second, fourth)


def test_one_buffer_serves_any_dtype_and_shape_of_its_size(runtime):
    first = runtime.workspace((256, 512), np.float32)
    where = address(first)
    del first
    again = runtime.workspace((1024, 64), np.float64)
    assert address(again) == where and again.dtype == np.float64


def test_small_huge_and_unkept_arrays_are_plain(runtime):
    small = runtime.workspace((16, 16), np.float32)
    assert small.flags.owndata and runtime.WORKSPACE == {}
    runtime.WORKSPACE_LIMIT = 0
    big = runtime.workspace(SHAPE, np.float32)
    assert big.flags.owndata and runtime.WORKSPACE == {}


def test_the_kept_total_stays_within_the_limit(runtime):
    runtime.WORKSPACE_LIMIT = 3 * SHAPE[0] * SHAPE[1] * 4
    arrays = [runtime.workspace(SHAPE, np.float32) for _ in range(5)]
    kept = [a for a in arrays if not a.flags.owndata]
    assert len(kept) == 3 and sum(map(len, runtime.WORKSPACE.values())) == 3
    assert all(not np.shares_memory(a, b) for i, a in enumerate(arrays)
               for b in arrays[i + 1:])


def test_threads_never_get_the_same_buffer_at_once(runtime):
    held, errors = [], []

    def take(mark: int):
        try:
            for step in range(50):
                array = runtime.workspace(SHAPE, np.float32)
                array.fill(mark * 1000 + step)
                held.append((array, mark * 1000 + step))
                if len(held) > 8:
                    held.pop(0)
                for kept, value in held:  # no other thread's array wrote into one held
                    if not (kept == value).all():
                        raise AssertionError(f"an array holding {value} was written over")
        except Exception as error:            # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=take, args=(mark,)) for mark in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    arrays = [array for array, _ in held]
    assert all(not np.shares_memory(a, b) for i, a in enumerate(arrays)
               for b in arrays[i + 1:])
    assert all((array == value).all() for array, value in held)


def test_outputs_kept_from_one_call_are_untouched_by_the_next():
    # every output and traced intermediate of the first call is held while a second call with
    # other inputs reuses the workspace: none may change (the buffers they use are not free)
    variant = with_run_defaults(api.load("gpt2_small", ["N=2", "B=2", "T_dec=64"]))
    prepared = _prepare(variant, "numpy", 0, "float32", False)
    entry = getattr(prepared.module, prepared.spec.name)
    keywords = _keywords(prepared, prepared.lowered.entry, prepared.sizes)
    arguments = list(prepared.inputs.values())
    trace: dict = {}
    first = entry(*arguments, prepared.params, **keywords, trace=trace)
    copies = [np.array(a) for a in first] + [np.array(a) for a in trace.values()
                                             if isinstance(a, np.ndarray)]
    other = [np.roll(a, 1) for a in arguments]
    for _ in range(3):
        entry(*other, prepared.params, **keywords)
    now = list(first) + [a for a in trace.values() if isinstance(a, np.ndarray)]
    assert prepared.module.rt.WORKSPACE, "nothing was kept: the test shows nothing"
    for before, after in zip(copies, now, strict=True):
        np.testing.assert_array_equal(after, before)
