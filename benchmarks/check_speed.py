"""How long `tspec check` takes on the full built-in spec, beside torch.export on nn.Transformer.

    python benchmarks/check_speed.py [--repeat 7]

Prints the median wall time of parsing the built-in spec and proving every shape under all of
its choice combinations (caches cleared each time), excluding interpreter and import start-up,
the same for the built-in spec with 15 more two-valued choices read in its blocks (32768 times
the combinations: a proof that enumerated them would take 32768 times as long),
and, when PyTorch is installed, the time torch.export needs to trace nn.Transformer with a
dynamic batch and dynamic source and target lengths (one path only), and their ratio.
"""

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path


def time_check(repeat: int, text: str | None = None) -> tuple[float, float, int]:
    """Median parse and check times of the built-in spec (or of ``text``), caches cleared."""
    from sympy.core.cache import clear_cache

    from tspec import api, shipped
    from tspec.checking.check import check
    from tspec.language.parser import parse, parse_file

    parse_times, check_times = [], []
    combos = 0
    for _ in range(repeat):
        shipped._parse_cached.cache_clear()
        clear_cache()     # sympy's own cache too: every repeat starts cold
        start = time.perf_counter()
        spec = parse_file(api.BUILTIN_SPEC) if text is None else parse(text, file="more.tspec")
        middle = time.perf_counter()
        result = check(spec, all_choices=True)
        end = time.perf_counter()
        assert result.ok, [f.text() for f in result.findings]
        combos = len(result.combinations)
        parse_times.append(middle - start)
        check_times.append(end - middle)
    return statistics.median(parse_times), statistics.median(check_times), combos


def more_choices_text() -> str:
    """The built-in spec with 15 more two-valued choices read in its blocks (the tests'
    ``support.specs.with_more_choices``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from support.specs import with_more_choices

    from tspec import shipped
    return with_more_choices(shipped.BUILTIN_SPEC.read_text())[0]


def time_torch_export(repeat: int) -> float | None:
    try:
        import torch
        from torch.export import Dim, export
    except ImportError:
        return None
    torch.manual_seed(0)
    model = torch.nn.Transformer(d_model=512, nhead=8, num_encoder_layers=6,
                                 num_decoder_layers=6, dim_feedforward=2048, dropout=0.0,
                                 batch_first=True).eval()
    src, tgt = torch.randn(2, 10, 512), torch.randn(2, 9, 512)
    batch, source, target = Dim("batch", min=2, max=64), Dim("T", min=2, max=512), \
        Dim("T_dec", min=2, max=512)
    shapes = {"src": {0: batch, 1: source}, "tgt": {0: batch, 1: target}}
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        export(model, (src, tgt), dynamic_shapes=shapes)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    start = time.perf_counter()
    import tspec.api  # noqa: F401  (import start-up, reported separately)
    import_time = time.perf_counter() - start
    parse_time, check_time, combos = time_check(args.repeat)
    total = parse_time + check_time
    print(f"machine: {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {platform.system()}")
    print(f"import tspec.api (sympy included):       {import_time:7.3f} s (not counted)")
    print(f"parse transformer.tspec:                 {parse_time:7.3f} s")
    print(f"prove all {combos} choice combinations:      {check_time:7.3f} s")
    print(f"tspec check, beyond start-up:            {total:7.3f} s (target < 0.5 s)")
    more_parse, more_check, more_combos = time_check(max(1, args.repeat // 2),
                                                     more_choices_text())
    print(f"15 more choices ({more_combos:,} combinations), parse and prove: "
          f"{more_parse + more_check:7.3f} s (target < 3 s), "
          f"{(more_parse + more_check) / total:.1f}x the built-in spec's")
    exported = time_torch_export(max(1, args.repeat // 3))
    if exported is None:
        print("torch.export of nn.Transformer:          (PyTorch not installed)")
    else:
        print(f"torch.export of nn.Transformer (1 path): {exported:7.3f} s")
        print(f"ratio torch.export / tspec check:        {exported / total:7.1f}x")


if __name__ == "__main__":
    main()
