"""What ptxas gives each CUDA kernel of the generated CuPy runtime on real GPUs: every
instantiation the runtime can ask CuPy for, compiled by nvcc for sm_80 and sm_90.

    python benchmarks/cuda_resources.py [--arch sm_80 sm_90] [--workers 2] [--wide]

Prints a Markdown table, a row per kernel and arch (``--wide``: a row per kernel, the archs
side by side): registers a thread, spill stores and loads, stack frame and static shared
memory, and the wall time of nvcc on the module the kernel is in; then a summary. The kernels,
the nvcc command and the limits are tests/support/nvcc.py's, which
tests/execution/test_cuda_compile.py holds to them; the exit status is 1 where a kernel is
past them (each named), 2 without nvcc.
"""

import argparse
import sys
import time
from pathlib import Path


def _nvcc():
    """tests/support/nvcc.py, where the kernels, the nvcc command and the limits are."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support import nvcc

    return nvcc


def long_table(results) -> list[str]:
    lines = [("| kernel | dtype | params | arch | registers | spill stores / loads (bytes) "
              "| stack (bytes) | static smem (bytes) | module compile |"),
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        used = r.resources
        lines.append(f"| `{r.kernel.expression}` | {r.kernel.dtype} | {r.kernel.params} | "
                     f"{r.arch} | {used.registers} | {used.spill_stores} / {used.spill_loads} | "
                     f"{used.stack} | {used.shared} | {r.seconds:.1f} s |")
    return lines


def wide_table(results, archs) -> list[str]:
    by_kernel: dict = {}
    for r in results:
        by_kernel.setdefault(r.kernel, {})[r.arch] = r
    each = " / ".join(archs)
    lines = [(f"| kernel | dtype | params | registers ({each}) | spills ({each}) "
              f"| stack ({each}) | static smem |"),
             "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for kernel, found in by_kernel.items():
        used = [found[arch].resources for arch in archs]
        smem = sorted({u.shared for u in used})
        lines.append(f"| `{kernel.expression}` | {kernel.dtype} | {kernel.params} | "
                     f"{' / '.join(str(u.registers) for u in used)} | "
                     f"{' / '.join(str(u.spill_stores + u.spill_loads) for u in used)} | "
                     f"{' / '.join(str(u.stack) for u in used)} | "
                     f"{' / '.join(str(s) for s in smem)} |")
    return lines


def summary(nvcc, results, modules, seconds, wall: float, workers: int) -> list[str]:
    def worst(field, unit=""):
        top = max(results, key=lambda r: getattr(r.resources, field))
        return f"{getattr(top.resources, field)}{unit} ({top.kernel.expression}, {top.arch})"

    kinds = {}
    for module in modules:
        for kernel in module.kernels:
            kinds.setdefault(kernel, module.kind)
    raw = sum(kind == "raw" for kind in kinds.values())
    spilled = [r for r in results if r.resources.spill_stores or r.resources.spill_loads]
    stacked = sorted({f"{r.kernel.expression} ({r.arch}): {r.resources.stack}"
                      for r in results if r.resources.stack})
    archs = sorted({r.arch for r in results})
    per_module = sorted(seconds)
    return [
        (f"instantiations: {len(kinds)} ({raw} RawModule kernels, {len(kinds) - raw} "
         f"element-wise), {len(modules)} modules, for {', '.join(archs)}"),
        f"most registers a thread: {worst('registers')} (limit {nvcc.REGISTER_LIMIT})",
        f"most static shared memory: {worst('shared', ' bytes')} (limit {nvcc.SHARED_LIMIT})",
        f"spills: {len(spilled)} kernels" + (": " + ", ".join(
            f"{r.kernel.expression} ({r.arch})" for r in spilled) if spilled else ""),
        f"stack frames: {'; '.join(stacked) or 'none'}",
        (f"nvcc: {wall:.1f} s wall for {len(seconds)} compilations, {workers} at a time "
         f"({sum(seconds):.1f} s in all); a module {per_module[0]:.1f}-{per_module[-1]:.1f} s "
         f"(median {per_module[len(per_module) // 2]:.1f} s)")]


def main() -> int:
    nvcc = _nvcc()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", nargs="+", default=list(nvcc.ARCHS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--wide", action="store_true", help="the archs side by side")
    args = parser.parse_args()
    if nvcc.MISSING:
        print(f"needs nvcc: {nvcc.MISSING}", file=sys.stderr)
        return 2
    modules = nvcc.modules()
    started = time.perf_counter()
    each = nvcc.compile_each(archs=tuple(args.arch), workers=args.workers)
    wall = time.perf_counter() - started
    seconds = [results[0].seconds for results in each]
    unique: dict = {}
    for result in (result for results in each for result in results):
        unique.setdefault((result.kernel, result.arch), result)
    results = list(unique.values())
    table = wide_table(results, args.arch) if args.wide else long_table(results)
    print("\n".join(table + [""] + summary(nvcc, results, modules, seconds, wall, args.workers)))
    problems = [problem for result in results for problem in nvcc.problems(result)]
    for problem in problems:
        print(f"past the limits: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
