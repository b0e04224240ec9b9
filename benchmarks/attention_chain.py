"""Attention whose scores are soft-capped, beside plain attention: time and peak memory.

    python benchmarks/attention_chain.py [--B 4] [--T 2048] [--H 8] [--repeat 3]

The generated NumPy scaled_dot_product_attention of the built-in spec as it is, and with its
scores' equation soft-capped (``softcap(Q_h @ K_h.T / sqrt(d_k)) + L_h``), causal mask: each
called without a trace (the blocked path, rt.attend_in_blocks, the chain applied to each
block of query rows) and with one (the equations as written: the whole score and weight
matrices). Prints the median time and the peak of memory allocated (tracemalloc), float32,
side by side in one run.
"""

import argparse
import platform
import statistics
import time
import tracemalloc

import numpy as np

PLAIN = 'S_h[H] "B T_q T_kv" "scores, plus the additive mask log M" = ' \
    'Q_h @ K_h.T / sqrt(d_k) + L_h'
CAPPED = 'S_h[H] "B T_q T_kv" "capped scores, plus the mask" = ' \
    'softcap(Q_h @ K_h.T / sqrt(d_k)) + L_h'


def attention(text: str):
    import tspec
    from tspec.codegen.generate import source
    from tspec.execution.loading import load_source
    spec = tspec.parse(text, file="bench.tspec")
    return load_source(source(spec, {"arch": "decoder_only"}, "numpy")) \
        .scaled_dot_product_attention


def measure(function, arguments: tuple, trace, repeat: int) -> tuple[float, int]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function(*arguments, trace=trace)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    function(*arguments, trace=trace)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("B", 4), ("T", 2048), ("H", 8), ("d_k", 64), ("repeat", 3)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    from tspec import shipped
    text = shipped.BUILTIN_SPEC.read_text()
    assert text.count(PLAIN) == 1
    rng = np.random.default_rng(0)
    shape = (args.H, args.B, args.T, args.d_k)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    L = np.where(np.tril(np.ones((args.T, args.T), bool)), 0, -np.inf).astype(np.float32)
    L = np.broadcast_to(L, (1, 1, args.T, args.T))
    print(f"machine: {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}; B={args.B} T={args.T} H={args.H} d_k={args.d_k} "
          "float32, causal mask")
    rows = []
    for label, spec_text in (("plain", text), ("soft-capped", text.replace(PLAIN, CAPPED))):
        function = attention(spec_text)
        for path, trace in (("blocked", None), ("as written", {})):
            seconds, peak = measure(function, (q, k, v, L), trace, args.repeat)
            rows.append((label, path, seconds, peak))
            print(f"{label:<12} {path:<11} {seconds:8.3f} s  peak {peak / 2**20:8.1f} MiB")
    (_, _, plain_s, plain_m), _, (_, _, capped_s, capped_m), (_, _, written_s, written_m) = rows
    print(f"soft-capped blocked / plain blocked: time {capped_s / plain_s:.2f}x, "
          f"memory {capped_m / plain_m:.2f}x; as written / blocked: time "
          f"{written_s / capped_s:.1f}x, memory {written_m / capped_m:.1f}x")


if __name__ == "__main__":
    main()
