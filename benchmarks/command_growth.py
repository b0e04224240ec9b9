"""How every command's work grows with the spec's size: specs of 10^2 to 10^5 tensors.

    python benchmarks/command_growth.py [--sizes 100,1000,10000,25000,100000] [--kinds chain,...]
                                        [--commands check,shapes,diff,docs,grid,run]

Four kinds of spec, each at every size n (tensors, every block call its own copy) whose text
fits a spec file (at most 1,000,000 bytes: a chain of 10^5 equations takes 3.7 MB, so chains
and stacks stop near 2.5 * 10^4):

    chain   one equation after another, n - 1 of them: X1 = relu(X0) + X0, X2 = ...
    blocks  a block of nine equations (two parameters, products, a residual) called one call
            after another, n / 12 calls, each its own copy
    widths  a stack of n / 2 products, each layer its own width dim (d1, d2, ...) and
            parameter: every count a sum of n / 2 distinct terms, every variant n / 2 dims
    nested  blocks that each call the one below twice, as deep as gives about n tensors
            (3 * 2^(depth - 1): 96, 768, 12,288, 98,304)

Each command runs through ``spec.cli.main`` as `tspec` runs it (its output to /dev/null, docs
to a temporary folder), in a fresh interpreter per measurement so that no cache carries over,
timed from after the imports to its end; the peak memory of that interpreter is reported
too. The dims are tiny (B = 2, d = 3 or 4), so that what grows is the spec, not the arrays.

    check   tspec check SPEC (the proof, every choice)
    shapes  tspec shapes A.toml
    diff    tspec diff A.toml B.toml (A and B differ in d: every tensor's shape differs)
    docs    tspec docs A.toml --out DIR (Markdown and HTML)
    grid    tspec check SPEC --grid d=1:100:1 --set B=2
    run     tspec run A.toml (the generated forward pass, at B = 2, d = 3)

The growth exponent of a command is the slope of log(time) against log(n) between the two
largest sizes it ran at (least squares over all of them in parentheses; small sizes are
dominated by fixed costs, so that figure understates). Goal: at most 1.2 for every command.
"""

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = ("check", "shapes", "diff", "docs", "grid", "run")
KINDS = ("chain", "blocks", "widths", "nested")
BLOCK = 9                      # equations in the repeated block
MAX_SPEC_BYTES = 1_000_000     # spec.language's limit on a spec file


def chain_spec(tensors: int) -> str:
    """tensors - 1 equations, each on the one before."""
    lines = ['spec chain "a chain"', 'dim B "batch"', 'dim d "width"', 'input X0 "B d" "x"']
    lines += [f'X{i} "B d" = relu(X{i - 1}) + X{i - 1}' for i in range(1, tensors)]
    return "\n".join(lines + [f"output X{tensors - 1}"]) + "\n"


def blocks_spec(tensors: int) -> str:
    """A block of BLOCK equations called (tensors - 1) / (BLOCK + 3) times, one call after
    another (each call: its BLOCK tensors, its two parameters and its output in the caller)."""
    calls = max(1, (tensors - 1) // (BLOCK + 3))
    lines = ['spec stack "repeated blocks"', 'dim B "batch"', 'dim d "width"',
             'block unit(X "B d") -> Y:', '    param W "d d" "weights"',
             '    param b "d" "bias"', '    A0 "B d" = X @ W + b']
    lines += [f'    A{i} "B d" = relu(A{i - 1}) * X' for i in range(1, BLOCK - 1)]
    lines += [f'    Y "B d" "the layer\'s output" = A{BLOCK - 2} + X',
              'input X0 "B d" "x"']
    lines += [f'X{i} "B d" = unit(X{i - 1}) as c{i}' for i in range(1, calls + 1)]
    return "\n".join(lines + [f"output X{calls}"]) + "\n"


def widths_spec(tensors: int) -> str:
    """A stack of products whose every layer has its own width: dims d, d1, d2, ..., a
    parameter and an equation a layer (every count a sum of distinct terms)."""
    layers = max(1, (tensors - 1) // 2)
    lines = ['spec widths "every layer its own width"', 'dim B "batch"', 'dim d "width"']
    lines += [f'dim d{i} "width {i}"' for i in range(1, layers + 1)]
    lines += ['input X0 "B d" "x"']
    for i in range(1, layers + 1):
        lines += [f'param W{i} "{f"d{i - 1}" if i > 1 else "d"} d{i}"',
                  f'X{i} "B d{i}" = relu(X{i - 1} @ W{i})']
    return "\n".join(lines + [f"output X{layers}"]) + "\n"


def nested_depth(tensors: int) -> int:
    """The depth of blocks calling blocks twice that expands to about ``tensors``."""
    return max(1, round(math.log2(tensors / 3)) + 1)


def nested_spec(tensors: int) -> str:
    """Blocks that each call the one below twice: 3 * 2^(depth - 1) tensors expanded."""
    depth = nested_depth(tensors)
    lines = ['spec nest "blocks calling blocks"', 'dim B "batch"', 'dim d "width"',
             'block f0(X "B d") -> Y:', '    Y "B d" = relu(X)']
    for i in range(1, depth):
        lines += [f'block f{i}(X "B d") -> Y:', f'    A "B d" = f{i - 1}(X) as first',
                  f'    Y "B d" = f{i - 1}(A) as second']
    lines += ['input X "B d" "x"', f'Y "B d" = f{depth - 1}(X) as top', "output Y"]
    return "\n".join(lines) + "\n"


SPECS = {"chain": chain_spec, "blocks": blocks_spec, "widths": widths_spec,
         "nested": nested_spec}


def tensors(kind: str, size: int) -> int:
    """How many tensors the spec of ``kind`` made for ``size`` expands to."""
    return 3 * 2 ** (nested_depth(size) - 1) if kind == "nested" else size


def write_case(folder: Path, kind: str, tensors: int) -> dict[str, str]:
    spec = folder / f"{kind}{tensors}.tspec"
    spec.write_text(SPECS[kind](tensors))
    # the widths of a widths spec: 2 (3 for side b's first), so that its d_i differ too
    widths = "".join(f"d{i} = 2\n" for i in range(1, (tensors - 1) // 2 + 1)) \
        if kind == "widths" else ""
    paths = {"spec": str(spec)}
    for side, d in (("a", 3), ("b", 4)):
        path = folder / f"{kind}{tensors}_{side}.toml"
        path.write_text(f'spec = "{spec.name}"\n[dims]\nB = 2\nd = {d}\n{widths}')
        paths[side] = str(path)
    return paths


def argv(command: str, paths: dict[str, str], out: str) -> list[str]:
    return {"check": ["check", paths["spec"]],
            "shapes": ["shapes", paths["a"]],
            "diff": ["diff", paths["a"], paths["b"]],
            "docs": ["docs", paths["a"], "--out", out],
            "grid": ["check", paths["spec"], "--grid", "d=1:100:1", "--set", "B=2"],
            "run": ["run", paths["a"]]}[command]


# one measurement, in a fresh interpreter: {"seconds", "status", "peak_mib"}
MEASURE = """
import json, os, resource, sys, time
from tspec import cli
argv = json.loads(sys.argv[1])
sys.stdout = open(os.devnull, "w")
start = time.perf_counter()
status = cli.main(argv + ["--time-limit", "3600"])
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "status": status, "peak_mib": peak}), file=sys.stderr)
"""


def measure(command: str, paths: dict[str, str], timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="tspec-growth-") as out:
        args = argv(command, paths, out)
        try:
            done = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(args)],
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"seconds": math.inf, "status": "timeout", "peak_mib": math.nan}
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    try:
        return json.loads(last)
    except json.JSONDecodeError:
        return {"seconds": math.nan, "status": f"failed: {last[:200]}", "peak_mib": math.nan}


def exponent(points: list[tuple[int, float]]) -> tuple[float, float]:
    """The slope between the last two points, and the least-squares slope over all."""
    points = [(n, t) for n, t in points if math.isfinite(t) and t > 0]
    if len(points) < 2:
        return math.nan, math.nan
    (n1, t1), (n2, t2) = points[-2:]
    last = math.log(t2 / t1) / math.log(n2 / n1)
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    fit = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return last, fit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000,25000,100000")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one measurement may take (then the larger sizes of "
                             "that command are skipped)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds, commands = args.kinds.split(","), args.commands.split(",")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"{platform.system()}; load average {os.getloadavg()[0]:.1f}")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="tspec-growth-specs-") as folder:
        for kind in kinds:
            fitting = [n for n in sizes if len(SPECS[kind](n).encode()) <= MAX_SPEC_BYTES]
            cases = {n: write_case(Path(folder), kind, n) for n in fitting}
            print(f"\n{kind}: seconds (peak MiB) at " + ", ".join(
                f"{tensors(kind, n):,}" for n in fitting) + " tensors; growth exponent"
                  + (f" (past {fitting[-1]:,}, a spec file past 1,000,000 bytes)"
                     if len(fitting) < len(sizes) else ""))
            for command in commands:
                points, cells = [], []
                for n in fitting:
                    if points and not math.isfinite(points[-1][1]):
                        cells.append("skipped")
                        continue
                    began = time.perf_counter()
                    result = measure(command, cases[n], args.timeout)
                    if result["status"] not in (0, 1):
                        cells.append(f"{result['status']} after "
                                     f"{time.perf_counter() - began:.0f} s")
                        points.append((tensors(kind, n), math.inf))
                        continue
                    points.append((tensors(kind, n), result["seconds"]))
                    cells.append(f"{result['seconds']:.3f} ({result['peak_mib']:.0f})")
                last, fit = exponent(points)
                worst = max(worst, last) if math.isfinite(last) else worst
                print(f"  {command:<7} " + "  ".join(f"{c:>16}" for c in cells)
                      + f"   {last:.2f} ({fit:.2f})", flush=True)
    print(f"\nlargest growth exponent: {worst:.2f} (goal: at most 1.2)")
    return 0 if worst <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
