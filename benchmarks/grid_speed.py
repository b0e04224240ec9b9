"""How long a grid of 10,000 variants takes: the one-off proof, then every combination at once.

    python benchmarks/grid_speed.py [--repeat 7]

The grid is the base Transformer (V = 37000) over d_model 256..1024 step 32, H 4, 8, 12, 16,
d_ff 512..2816 step 256 and N 1..10: 25 x 4 x 10 x 10 = 10,000 combinations. Prints the
median wall time, over the repeats, of the symbolic part (parse the spec, prove its shapes
under the variant's choices, cost the model: ``spec.grid.plan``; the spec cache and sympy's
cache cleared each time, so each repeat starts cold), of judging and counting every
combination (``spec.grid.judge``), and of what `tspec check --grid` adds to print them (the
points as Python objects and the text table). For scale, it also times ``spec.check`` of
single variants, one combination at a time, on a sample of the grid.
"""

import argparse
import platform
import statistics
import time

AXES = {"d_model": "256:1024:32", "H": "4,8,12,16", "d_ff": "512:2816:256", "N": "1:10:1"}
SETTINGS = ["V=37000"]
SAMPLE = 100          # single-variant checks timed, to extrapolate to the whole grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    start = time.perf_counter()
    from sympy.core.cache import clear_cache

    from tspec import api
    from tspec.analysis.grid import judge, parse_axis, plan
    import_time = time.perf_counter() - start

    axes = [parse_axis(f"{name}={values}") for name, values in AXES.items()]
    plans, judges, shows = [], [], []
    for _ in range(args.repeat):
        api._parse_cached.cache_clear()
        clear_cache()
        start = time.perf_counter()
        variant = api.load("base", SETTINGS)
        prepared = plan(variant, axes, set())
        middle = time.perf_counter()
        grid = judge(prepared, axes)
        for _ in grid.chunks():       # judged and counted as read: read every combination
            pass
        end = time.perf_counter()
        grid.text()
        shown = time.perf_counter()
        plans.append(middle - start)
        judges.append(end - middle)
        shows.append(shown - end)
    assert prepared.proof.ok and len(grid) == 10_000

    sample = list(grid.points())[::len(grid) // SAMPLE]
    start = time.perf_counter()
    for point in sample:
        api.check(api.load("base", SETTINGS + [f"{k}={v}" for k, v in point.dims.items()]))
    one_by_one = (time.perf_counter() - start) / len(sample) * len(grid)

    proof, evaluation, output = (statistics.median(t) for t in (plans, judges, shows))
    print(f"machine: {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {platform.system()}")
    print(f"grid: base, {' x '.join(f'{a.name} ({a.size})' for a in axes)} = {len(grid):,} "
          f"combinations ({grid.valid_count:,} valid, {grid.invalid_count:,} invalid)")
    print(f"import spec (sympy included):             {import_time:7.3f} s (not counted)")
    print(f"proof once (parse, prove, cost; cold):    {proof:7.3f} s")
    print(f"judge and count every combination:        {evaluation:7.3f} s")
    print(f"grid, beyond start-up:                    {proof + evaluation:7.3f} s "
          "(target about 1 s)")
    print(f"points and text table (tspec check --grid): {output:5.3f} s")
    print(f"one spec.check per combination, extrapolated from {len(sample)}: "
          f"{one_by_one:7.1f} s")


if __name__ == "__main__":
    main()
