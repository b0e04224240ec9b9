"""Resource limits: `tspec run` and the generated functions estimate the memory they need
from the spec's counts and refuse absurd sizes before allocating anything."""

import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tspec import api
from tspec.cli import main
from tspec.codegen.execution import run as run_module
from tspec.codegen.execution import weights
from tspec.codegen.execution.loading import load_module, load_source
from tspec.codegen.execution.run import _keywords, _prepare, estimate_memory, run, with_run_defaults
from tspec.codegen.generate import source
from tspec.errors import UsageError
from tspec.language.parser import parse

GENERATED = api.SPEC_DIR.parent / "generated" / "numpy"


@pytest.mark.parametrize("name, settings", [
    ("base", []),
    ("gpt2_small", []),
    ("bert_base", []),
    ("llama3_8b", ["d_model=256", "H=4", "H_kv=2", "N=2", "d_ff=512", "V=1000"]),
    ("transformer", ["arch=decoder_only", "positional=relative", "d_model=64", "H=4", "N=2",
                     "d_ff=128"]),
])
def test_the_estimate_is_what_the_traced_forward_holds(name, settings):
    # the estimate comes from the spec's counts; the arrays come from running the generated
    # code with a trace (which keeps every intermediate): distinct arrays, counted once
    variant = with_run_defaults(api.load(name, settings))
    estimate = estimate_memory(variant)
    prepared = _prepare(variant, "numpy", 0, "float32", False)
    trace: dict = {}
    entry = getattr(prepared.module, prepared.spec.name)
    entry(*prepared.inputs.values(), prepared.params,
          **_keywords(prepared, prepared.lowered.entry, prepared.sizes), trace=trace)
    arrays = {id(a): a.nbytes for a in weights.flatten(trace).values()}
    assert estimate.activations == sum(arrays.values())
    assert estimate.parameters == sum(a.nbytes for a in weights.flatten(prepared.params).values())
    assert estimate.inputs == sum(a.nbytes for a in prepared.inputs.values())


def test_an_absurd_variant_is_refused_before_anything_is_allocated(capsys, monkeypatch):
    monkeypatch.setattr(run_module.weights, "memory_bytes", lambda: 16 * 2**30)
    monkeypatch.setattr(run_module.weights, "expected_shapes", None)   # never reached
    assert main(["run", "base", "--set", "d_model=1000000000"]) == 2
    assert capsys.readouterr().err == (
        "tspec: error: base needs about 268,221,142,143.0 GiB to run in float32 (parameters "
        "268,221,092,313.5 GiB, inputs 1.1 KiB, activations 49,829.5 GiB, overhead 1.3 MiB "
        "for 534 arrays and 92 calls), more than the memory this process may use (16.0 GiB): "
        "make its dims smaller with --set, or raise --max-memory\n")


def test_a_deep_stack_is_refused_without_building_its_layers(capsys):
    # a billion layers: the estimate is symbolic, so the refusal takes no time and no memory
    assert main(["run", "base", "--set", "N=1000000000", "--max-memory", "64G"]) == 2
    assert capsys.readouterr().err == (
        "tspec: error: base needs about 32,954,335.2 GiB to run in float32 (parameters "
        "27,381,897.0 GiB, inputs 1.1 KiB, activations 5,493,164.1 GiB, overhead 79,274.2 GiB "
        "for 85,000,000,024 arrays and 15,000,000,002 calls), more than the limit given "
        "(64.0 GiB): make its dims smaller with --set, or raise --max-memory\n")


TINY = ["d_model=2", "H=1", "d_ff=1", "V=2", "T=1", "T_dec=1", "B=1"]


def test_tiny_arrays_in_huge_numbers_are_refused_before_the_run(capsys, monkeypatch):
    # was accepted (an estimate of 120.5 MiB: the elements alone), ran 219 s, reached 7.7 GB
    # and died with a MemoryError traceback: what Python keeps for each of the 17 million
    # arrays and 3 million calls is what such a run takes
    monkeypatch.setattr(run_module, "lower", None)      # never reached
    assert main(["run", "base", "--set", "N=200000", *(a for setting in TINY
                                                        for a in ("--set", setting)),
                 "--max-memory", "130M"]) == 2
    assert capsys.readouterr().err == (
        "tspec: error: base needs about 16.0 GiB to run in float32 (parameters 62.6 MiB, "
        "inputs 18 bytes, activations 58.0 MiB, overhead 15.9 GiB for 17,000,024 arrays and "
        "3,000,002 calls), more than the limit given (130.0 MiB): make its dims smaller with "
        "--set, or raise --max-memory\n")


# the peak resident memory of the run alone: Linux's high-water mark, reset before it
PEAK = """
import sys
from tspec import api
from tspec.codegen.execution.run import estimate_memory, run, with_run_defaults
variant = with_run_defaults(api.load(sys.argv[1], sys.argv[2:]))
def status(key):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
                if line.startswith(key))
before = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as reset:
    reset.write("5")
run(variant)
print(status("VmHWM:") - before, estimate_memory(variant).total)
"""


def _chain(path: Path, length: int) -> str:
    lines = ['dim B "b"', 'dim d "d"', 'input X0 "B d" "x"']
    lines += [f'X{i} "B d" = relu(X{i - 1})' for i in range(1, length + 1)]
    path.write_text("\n".join(lines + [f"output X{length}"]) + "\n")
    return str(path)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("kind", ["layers", "equations"])
def test_the_estimate_grows_at_least_as_fast_as_what_a_run_takes(tmp_path, kind):
    # the peak memory of a run grows with the layers (arrays and calls: the trace, the
    # parameters) and with the equations (their code) by no more than the estimate does;
    # before, the estimate grew by the elements alone (tens of KiB where the run took 9 and
    # 27 MB more)
    if kind == "layers":
        small, large = (["base", f"N={n}", *TINY] for n in (100, 700))
    else:
        small, large = ([_chain(tmp_path / f"c{n}.tspec", n), "B=1", "d=2"] for n in (300, 2000))
    (peak_small, estimate_small), (peak_large, estimate_large) = (
        map(int, subprocess.run([sys.executable, "-c", PEAK, *argv], capture_output=True,
                                text=True, check=True, timeout=300).stdout.split())
        for argv in (small, large))
    assert peak_large - peak_small <= estimate_large - estimate_small


def test_max_memory_sets_the_limit(capsys):
    assert main(["run", "base", "--max-memory", "100M"]) == 2
    assert capsys.readouterr().err == (
        "tspec: error: base needs about 208.4 MiB to run in float32 (parameters 172.1 MiB, "
        "inputs 1.1 KiB, activations 34.9 MiB, overhead 1.3 MiB for 534 arrays and 92 calls), "
        "more than the limit given (100.0 MiB): make its dims smaller with --set, or raise "
        "--max-memory\n")
    assert main(["run", "base", "--max-memory", "0.25GiB"]) == 0


@pytest.mark.parametrize("text, message", [
    ("1x", "--max-memory takes a size such as 512M or 64G, got '1x'"),
    ("-5G", "--max-memory takes a size such as 512M or 64G, got '-5G'"),
    ("1e9", "--max-memory takes a size such as 512M or 64G, got '1e9'"),
    ("9" * 30, f"--max-memory takes a size such as 512M or 64G, got '{'9' * 30}'"),
    ("0.1", "--max-memory must be at least one byte, got '0.1'"),
    ("0", "--max-memory must be at least one byte, got '0'"),
])
def test_bad_max_memory_values(capsys, text, message):
    assert main(["run", "base", f"--max-memory={text}"]) == 2
    assert capsys.readouterr().err == f"tspec: error: {message}\n"


def test_the_api_refuses_with_a_usage_error():
    variant = with_run_defaults(api.load("gpt2_small"))
    with pytest.raises(UsageError, match=r"^gpt2_small needs about 543\.7 MiB to run in "
                                         r"float32 \(parameters 474\.7 MiB, inputs 576 bytes, "
                                         r"activations 68\.0 MiB, overhead 1\.0 MiB for 473 "
                                         r"arrays and 74 calls\), more than the limit given "
                                         r"\(1\.0 MiB\)"):
        run(variant, max_memory=2**20)


# -- the generated functions' own checks

def test_a_generated_function_refuses_inputs_past_its_memory_limit(monkeypatch):
    model = load_module(GENERATED / "decoder_only.py")
    variant = with_run_defaults(api.load("transformer", ["arch=decoder_only", "d_model=64",
                                                         "H=4", "N=1", "d_ff=128"]))
    prepared = _prepare(variant, "numpy", 0, "float32", False)
    u, m = prepared.inputs.values()
    monkeypatch.setattr(model, "MEMORY_LIMIT", 100_000)
    with pytest.raises(MemoryError) as caught:
        model.transformer(u, m, prepared.params, H=4)
    assert str(caught.value) == (
        "transformer would allocate about 0.0 GiB for its tensors, more than MEMORY_LIMIT "
        "(0.0 GiB): give it smaller inputs, or set its module's MEMORY_LIMIT")
    monkeypatch.setattr(model, "MEMORY_LIMIT", None)
    logits, _ = model.transformer(u, m, prepared.params, H=4)
    assert logits.shape == (2, 32, 1000)


def test_absurd_inputs_are_refused_before_they_are_materialised():
    # a broadcast view claims a million sequences of a million tokens without holding them:
    # the attention scores alone would be 10^12 times larger than the machine
    model = load_module(GENERATED / "decoder_only.py")
    variant = with_run_defaults(api.load("transformer", ["arch=decoder_only", "d_model=64",
                                                         "H=4", "N=1", "d_ff=128"]))
    params = _prepare(variant, "numpy", 0, "float32", False).params
    u = np.broadcast_to(np.zeros((1, 1), dtype=np.int64), (10**6, 10**6))
    m = np.broadcast_to(np.ones((1, 1), dtype=bool), (10**6, 10**6))
    with pytest.raises(MemoryError, match=r"^transformer would allocate about [0-9,.]+ GiB "
                                          r"for its tensors, more than the memory this "
                                          r"process may use "):
        model.transformer(u, m, params, H=4)


def test_the_default_limit_is_the_memory_this_process_may_use():
    """memory_total() is tspec run's default limit too (weights.memory_bytes): the machine's
    memory, or the address-space limit (ulimit -v) where that is lower."""
    model = load_module(GENERATED / "decoder_only.py")
    assert model.rt.memory_total() == weights.memory_bytes()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)      # a process may lower its own only
    limit = 6 * 2**30 if hard == resource.RLIM_INFINITY else min(6 * 2**30, hard)
    script = ("import resource, sys; from tspec.codegen.execution.loading import load_module; "
              f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {hard})); "
              f"print(load_module({str(GENERATED / 'decoder_only.py')!r}).rt.memory_total())")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, cwd=Path(__file__).parents[2])
    assert int(shown.stdout) == min(limit, model.rt.memory_total())


def test_each_function_checks_its_own_tensors():
    text = source(parse('dim B "b"\ndim d "d"\ndim f "f"\n'
                        'block ff(X "B d") -> Y:\n'
                        '    param W_1 "d f"\n    param W_2 "f d"\n'
                        '    U "B f" = relu(X @ W_1)\n    Y "B d" = U @ W_2\n'
                        'input X "B d"\nY "B d" = ff(X) as layer_1\noutput Y\n', "t.tspec"), {})
    assert '    rt.require_memory("ff", MEMORY_LIMIT, (B*d + B*f) * X.dtype.itemsize)\n' in text
    model = load_source(text)
    X = np.ones((4, 3))
    params = {"layer_1": {"W_1": np.ones((3, 5)), "W_2": np.ones((5, 3))}}
    model.MEMORY_LIMIT = (4 * 3 + 4 * 5) * 8
    np.testing.assert_array_equal(model.t(X, params), np.full((4, 3), 15.0))
    model.MEMORY_LIMIT -= 1
    with pytest.raises(MemoryError, match="^ff would allocate about"):
        model.t(X, params)


def test_a_decoding_step_counts_the_room_its_cache_buffers_keep():
    """extend copies a state into a buffer with room for half as many entries again, so the
    step's estimate counts each extended state's bytes 3/2 times: a limit that would hold the
    state's bytes once refuses; one that holds the 3/2 passes."""
    model = load_module(GENERATED / "decoder_only.py")
    B, H, T_past, T_x, d_k, d_model = 2, 4, 6, 2, 8, 32
    rng = np.random.default_rng(0)
    params = {name: rng.standard_normal((d_model, d_model)) for name in ("W_Q", "W_K", "W_V",
                                                                            "W_O")}
    X, L_h = rng.standard_normal((B, T_x, d_model)), np.zeros((1, B, T_x, T_past + T_x))
    own = 4 * B * H * T_x * d_k + 3 * B * H * T_x * d_k + B * T_x * d_model
    state = B * H * d_k * (T_past + T_x)                 # each of K_h and V_h

    def call():
        cache = {"K_past": rng.standard_normal((H, B, T_past, d_k)),
                 "V_past": rng.standard_normal((H, B, T_past, d_k))}
        model.cached_self_attention(X, L_h, params, cache)
        return cache

    model.MEMORY_LIMIT = (own + 2 * state) * 8
    try:
        with pytest.raises(MemoryError, match="^cached_self_attention would allocate about"):
            call()
        model.MEMORY_LIMIT = (own + 3 * state) * 8
        cache = call()
    finally:
        model.MEMORY_LIMIT = None
    buffer = cache["K_past"].base                      # what extend allocated: 8 + 4 positions
    assert cache["K_past"].shape == (H, B, T_past + T_x, d_k)
    assert buffer.nbytes == 3 * state * 8 // 2
