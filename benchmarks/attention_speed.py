"""attend_fused's kernels against the path they replace, and against PyTorch, on one GPU.

    python benchmarks/attention_speed.py [--dtype float32 float16] [--repeat 20] [--rounds 3]
    python benchmarks/attention_speed.py --cpu     # a smoke run on the CPU harness, tiny shapes

For each dtype and shape (B=8, H=12, d=64: a causal prefill at T=1024, a padded encoder at
T=1024, a decoding step of one query row against 4096 cached keys), times attention in the
generated CuPy runtime three ways, each a whole call between two device synchronisations, in
blocks of calls taken in turn for several rounds (medians): attend_fused (one kernel that
never stores the scores; attend_split + attend_combine for one row), the earlier path
(masked_softmax over the stored scores, then batched_matmul), and PyTorch's
scaled_dot_product_attention on the same tensors (with a boolean mask where one is needed;
skipped without torch on CUDA). Prints the kernels' compile time apart (the first build of
each kernel module: NVRTC, or a load from CuPy's kernel cache on a second run), the largest
difference of each path from the fused one relative to its scale, and the peak memory CuPy's
pool holds in each path.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="+", default=["float32", "float16"],
                        choices=["float32", "float16", "float64"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu", action="store_true",
                        help="run on the CPU harness (tests/support/cupy_on_cpu), tiny shapes")
    args = parser.parse_args()

    import numpy as np

    from tspec import api
    from tspec.codegen.generate import source

    spec = api.read_spec(api.BUILTIN_SPEC)
    if args.cpu:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from support import cupy_on_cpu
        cp = cupy_on_cpu.cupy
        rt = cupy_on_cpu.load_source(source(spec, {}, "cupy"), private=True).rt
        B, H, d, T, T_cache = 1, 2, 64, 48, 300
        args.repeat, args.rounds = 1, 1
    else:
        import cupy as cp

        from tspec.execution.loading import load_source
        rt = load_source(source(spec, {}, "cupy"), private=True).rt
        B, H, d, T, T_cache = 8, 12, 64, 1024, 4096
    torch = None
    if not args.cpu:
        try:
            import torch
            torch = torch if torch.cuda.is_available() else None
        except ImportError:
            pass

    def synchronise():
        if not args.cpu:
            cp.cuda.Device().synchronize()
            if torch is not None:
                torch.cuda.synchronize()

    def block_time(function, repeat):
        synchronise()
        start = time.perf_counter()
        for _ in range(repeat):
            result = function()
        synchronise()
        return (time.perf_counter() - start) / repeat, result

    def stored(q, k, v, L):                            # the path attend_fused replaced
        return rt.batched_matmul(rt.masked_softmax(rt.batched_matmul(q, k.swapaxes(-1, -2)), L),
                                 v)

    device = "the CPU harness" if args.cpu else cp.cuda.runtime.getDeviceProperties(
        cp.cuda.Device().id)["name"].decode()
    print(f"device: {device}; B={B} H={H} d={d}; medians of {args.rounds} rounds of "
          f"{args.repeat} calls")
    rng = np.random.default_rng(0)
    for name in args.dtype:
        dtype = np.dtype(name)
        started = time.perf_counter()
        rt.attend_kernels.cache_clear()
        built = [rt.attend_kernels(name, 64, False)]
        if name == "float16":
            built.append(rt.attend_kernels(name, 64, True))
        print(f"\n{name}: kernels built in {time.perf_counter() - started:.2f} s"
              f"{'' if all(built) else ' (NOT ALL: attend_fused falls back; see the warning)'}")
        keep = np.ones((B, T), dtype=bool)
        keep[:, T - T // 4:] = False
        shapes = {
            "causal prefill": (T, T, np.where(np.tri(T, T) == 1, 0.0, -np.inf)[None, None]),
            "padded encoder": (T, T, np.where(keep[:, None, :], 0.0, -np.inf)[None]),
            "decoding step": (1, T_cache, np.zeros((1, 1, 1, T_cache))),
        }
        for shape, (T_q, T_kv, L) in shapes.items():
            q = cp.asarray((rng.standard_normal((H, B, T_q, d)) / 8).astype(dtype))
            k, v = (cp.asarray(rng.standard_normal((H, B, T_kv, d)).astype(dtype))
                    for _ in range(2))
            mask = cp.asarray(L.astype(dtype))
            paths = {"attend_fused": lambda q=q, k=k, v=v, m=mask: rt.attend_fused(q, k, v, m),
                     "stored scores": lambda q=q, k=k, v=v, m=mask: stored(q, k, v, m)}
            if torch is not None:
                tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
                tmask = torch.as_tensor(cp.isfinite(mask), device="cuda")
                paths["torch sdpa"] = lambda q=tq, k=tk, v=tv, m=tmask: (
                    torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m))
            times = {path: [] for path in paths}
            results, peaks = {}, {}
            for path, function in paths.items():              # warm-up, and the peaks
                if not args.cpu:
                    cp.get_default_memory_pool().free_all_blocks()
                results[path] = function()
                synchronise()
                if not args.cpu:
                    peaks[path] = cp.get_default_memory_pool().total_bytes()
            for _ in range(args.rounds):
                for path, function in paths.items():
                    times[path].append(block_time(function, args.repeat)[0])
            reference = np.asarray(cp.asnumpy(results["attend_fused"]), dtype=np.float64)
            fused = statistics.median(times["attend_fused"])
            print(f"  {shape} (T_q={T_q}, T_kv={T_kv}):")
            for path in paths:
                ours = results[path]
                ours = ours.cpu().numpy() if hasattr(ours, "cpu") else cp.asnumpy(ours)
                scale = max(1.0, float(np.abs(reference).max()))
                error = float(np.nanmax(np.abs(ours.astype(np.float64) - reference))) / scale
                median = statistics.median(times[path])
                memory = f", pool {peaks[path] / 2**20:,.0f} MiB" if path in peaks else ""
                print(f"    {path:14s} {median * 1e3:9.3f} ms  {median / fused:5.2f}x fused"
                      f"  max diff {error:.1e}{memory}")


if __name__ == "__main__":
    main()
