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
from tspec.codegen.generate import source
from tspec.errors import UsageError
from tspec.execution import run as run_module
from tspec.execution import weights
from tspec.execution.loading import load_module, load_source
from tspec.execution.run import _keywords, _prepare, estimate_memory, run, with_run_defaults
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
from tspec.execution.run import estimate_memory, run, with_run_defaults
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


@pytest.mark.slow
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
    script = ("import resource, sys; from tspec.execution.loading import load_module; "
              f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {hard})); "
              f"print(load_module({str(GENERATED / 'decoder_only.py')!r}).rt.memory_total())")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, cwd=Path(__file__).parents[2])
    assert int(shown.stdout) == min(limit, model.rt.memory_total())


def test_the_model_checks_its_tensors_and_the_largest_call_s_before_it_starts():
    """One guard, in the model's function: its own tensors and the most any call it makes
    holds at once (each call's own and its largest call's); a block called directly has
    none. A call that holds less than another in every term is left out of the max."""
    text = source(parse('dim B "b"\ndim d "d"\ndim f "f"\ndim g "g"\n'
                        'block ff(X "B d") -> Y:\n'
                        '    param W_1 "d f"\n    param W_2 "f d"\n'
                        '    U "B f" = relu(X @ W_1)\n    Y "B d" = U @ W_2\n'
                        'block wide(X "B d") -> Z:\n    param W "d g"\n    Z "B g" = X @ W\n'
                        'block narrow(X "B d") -> Z:\n    Z "B d" = X * 2\n'
                        'input X "B d"\nY "B d" = ff(X) as layer_1\nZ "B g" = wide(Y) as layer_2\n'
                        'N "B d" = narrow(Y) as layer_3\nS "B g" = Z * 2\noutput S\n', "t.tspec"),
                  {})
    assert text.count("rt.require_memory(") == 1
    # the guard one line in the model, its count after the model
    assert '    """\n    rt.require_memory("t", MEMORY_LIMIT, t_bytes(X, params))\n' in text
    assert text.index("def t(") < text.index("def t_bytes(")
    assert text.endswith(
        "def t_bytes(X, params) -> int:\n"
        '    """The most bytes t\'s tensors take at once, its calls\' included (the spec\'s '
        'activation counts):\n'
        '    what its memory guard checks against MEMORY_LIMIT."""\n'
        "    B = X.shape[-2]\n"
        "    d = X.shape[-1]\n"
        '    f = params["layer_1"]["W_1"].shape[-1]\n'
        '    g = params["layer_2"]["W"].shape[-1]\n'
        "    return (\n"
        "        B*g * X.dtype.itemsize\n"
        "        + max(\n"
        "            (B*d + B*f) * X.dtype.itemsize,\n"
        "            B*g * X.dtype.itemsize,\n"
        "        )\n"
        "    )\n")
    model = load_source(text)
    X = np.ones((4, 3))
    params = {"layer_1": {"W_1": np.ones((3, 5)), "W_2": np.ones((5, 3))},
              "layer_2": {"W": np.ones((3, 7))}}
    model.MEMORY_LIMIT = (4 * 7 + 4 * 3 + 4 * 5) * 8           # S, then ff's U and Y
    np.testing.assert_array_equal(model.t(X, params), np.full((4, 7), 2 * 3 * 15.0))
    model.MEMORY_LIMIT -= 1
    with pytest.raises(MemoryError, match="^t would allocate about"):
        model.t(X, params)
    np.testing.assert_array_equal(model.ff(X, params["layer_1"]), np.full((4, 3), 15.0))


def test_a_model_s_guard_reads_a_dim_only_its_layers_show_from_them():
    """d_ff shows only in the feed-forward layers' weights: the model's guard reads it from
    the first layer, and takes 0 for a stack of no layers (which holds nothing)."""
    model = load_module(GENERATED / "decoder_only.py")
    assert '    d_ff = rt.axis_size(params, "decoder", "layers", 0, "feed_forward", "W_1", ' \
        'axis=-1)\n' in Path(model.__file__).read_text()
    params = {"decoder": {"layers": [{"feed_forward": {"W_1": np.ones((3, 11))}}]}}
    assert model.rt.axis_size(params, "decoder", "layers", 0, "feed_forward", "W_1",
                              axis=-1) == 11
    assert model.rt.axis_size({"decoder": {"layers": []}}, "decoder", "layers", 0,
                              "feed_forward", "W_1", axis=-1) == 0


def test_a_count_is_spelt_apart_from_a_block_of_its_name():
    """The model's count is <model>_bytes, or with underscores after it where a block of the
    spec has that name."""
    text = source(parse('spec t "t"\ndim B "b"\ndim d "d"\n'
                        'block t_bytes(X "B d") -> Y:\n    Y "B d" = X * 2\n'
                        'input X "B d"\nY "B d" = t_bytes(X)\noutput Y\n', "t.tspec"), {})
    assert 'rt.require_memory("t", MEMORY_LIMIT, t_bytes_(X))' in text
    model = load_source(text)
    np.testing.assert_array_equal(model.t(np.ones((2, 3))), np.full((2, 3), 2.0))
    assert model.t_bytes_(np.ones((2, 3))) == 2 * 3 * 8            # the call's Y, float64
    model.MEMORY_LIMIT = model.t_bytes_(np.ones((2, 3))) - 1
    with pytest.raises(MemoryError, match="^t would allocate about"):
        model.t(np.ones((2, 3)))


def test_a_decoding_step_counts_the_room_its_cache_buffers_keep(monkeypatch):
    """extend copies a state into a buffer with room for half as many entries again, so the
    step's guard counts each extended state's bytes 3/2 times (NumPy and CuPy alike); the
    guard refuses a limit one byte short of what it counts, and a block called
    directly (cached_self_attention) has no guard of its own."""
    model = load_module(GENERATED / "decoder_only.py")
    text = Path(model.__file__).read_text()
    guard = text[text.index("def decode_step_bytes("):]
    assert "(3/2)*B*H*d_k*(T_new + T_past)" in guard
    assert "(3/2)*B*H*d_v*(T_new + T_past)" in guard
    cupy = (GENERATED.parent / "cupy" / "decoder_only.py").read_text()
    assert "(3/2)*B*H*d_k*(T_new + T_past)" in cupy
    variant = with_run_defaults(api.load("transformer", ["arch=decoder_only", "d_model=32",
                                                         "H=4", "N=2", "d_ff=64"]))
    prepared = _prepare(variant, "numpy", 0, "float64", False)
    u, m = prepared.inputs.values()
    _, _, cache = model.prefill(u[:, :6], m[:, :6], prepared.params, H=4)
    needed = []
    check = model.rt.require_memory
    monkeypatch.setattr(model.rt, "require_memory",
                        lambda name, limit, n: needed.append(n) or check(name, limit, n))
    monkeypatch.setattr(model, "MEMORY_LIMIT", 1)
    with pytest.raises(MemoryError, match="^decode_step would allocate about"):
        model.decode_step(u[:, 6:7], m[:, :7], prepared.params, cache)
    monkeypatch.setattr(model, "MEMORY_LIMIT", needed[0] - 1)     # refused before the cache
    with pytest.raises(MemoryError, match="^decode_step would allocate about"):   # changes
        model.decode_step(u[:, 6:7], m[:, :7], prepared.params, cache)
    monkeypatch.setattr(model, "MEMORY_LIMIT", needed[0])
    model.decode_step(u[:, 6:7], m[:, :7], prepared.params, cache)
    assert cache["decoder"]["layers"][0]["self_attention"]["K_past"].shape[-2] == 7
    assert len(set(needed)) == 1
    monkeypatch.setattr(model, "MEMORY_LIMIT", 1)
    rng = np.random.default_rng(0)
    layer = prepared.params["decoder"]["layers"][0]["self_attention"]
    X, L_h = rng.standard_normal((2, 1, 32)), np.zeros((1, 2, 1, 7))
    model.cached_self_attention(X, L_h, layer, {"K_past": rng.standard_normal((4, 2, 6, 8)),
                                                "V_past": rng.standard_normal((4, 2, 6, 8))})
