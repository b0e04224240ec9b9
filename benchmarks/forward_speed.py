"""The generated NumPy forward pass against PyTorch eager on the CPU, side by side.

    python benchmarks/forward_speed.py [--threads N] [--repeat 5] [--baseline SHA]

Three shapes, float32, the same weights on both sides and the same thread count (OpenBLAS for
NumPy, torch.set_num_threads for PyTorch): the base encoder layer (B=8, T=128), the base
encoder-decoder stacks (B=4, T=T_dec=128, N=6, causal target masks; once with the last source
half padding, where PyTorch's encoder drops the padded tokens (nested tensors), once without),
and a GPT-2-small-shaped causal stack (B=1, T=1024, d_model=768, 12 heads, 12 layers, pre-LN,
tanh GELU). PyTorch runs nn.TransformerEncoderLayer / nn.Transformer / nn.TransformerEncoder
under inference_mode, its default eager path. A third side is the yardstick the target was
set with, a careful hand-written NumPy forward (benchmarks/handwritten_numpy.py, BLAS's own
threads): it tells what NumPy reaches against PyTorch on this machine. The sides are measured
in turn, a block of calls each, for three rounds, so that the machine's slow spells fall on
all alike. Prints the median times, the ratios to PyTorch, the achieved GFLOP/s (matrix
products only), NumPy's own sgemm rate measured in the same run, and each side's largest
difference from PyTorch's output.

With --baseline SHA it times the generated code against the code commit SHA generates for the
same shapes and choices (its generator run on its own tree, in a subprocess), in one process
with the same weights and threads: --rounds (4) rounds of five calls each, in turn, each block
after an untimed call. Prints both medians, their ratio, the median of the rounds' ratios and
the largest difference of the outputs.
"""

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the generated modules each shape runs: name -> choices
MODULES = {"encoder_layer": {"arch": "encoder_only", "attention_bias": "all"},
           "stacks": {"arch": "encoder_decoder", "attention_bias": "all"},
           "causal": {"arch": "decoder_only", "norm": "pre", "activation": "gelu_tanh",
                      "attention_bias": "all"}}
# what the installed tree of another commit runs to write its NumPy modules for MODULES (and
# its runtime, where it has one) into a folder: argv[1] the folder, argv[2] MODULES as JSON,
# argv[3] where that tree is installed (its code must be what runs, not this tree's)
WRITE_MODULES = """
import json, sys
from pathlib import Path
try:
    from tspec import api
    from tspec.codegen import generate
except ImportError:                       # before the package was tspec
    from codegen import generate
    from spec import api
if not generate.__file__.startswith(sys.argv[3]):
    sys.exit(f"the baseline's generator is not the one installed: {generate.__file__}")
out, spec = Path(sys.argv[1]), api.read_spec(api.BUILTIN_SPEC)
for name, choices in json.loads(sys.argv[2]).items():
    (out / f"{name}.py").write_text(generate.source(spec, choices), encoding="utf-8")
if hasattr(generate, "runtime_source"):
    (out / "_runtime.py").write_text(generate.runtime_source("numpy"), encoding="utf-8")
"""


def baseline_modules(sha: str) -> dict[str, Path]:
    """The NumPy modules commit ``sha`` generates for MODULES, written by its own code (its
    tree installed into a temporary folder) into a temporary folder: name -> path."""
    folder = Path(tempfile.mkdtemp(prefix="tspec-baseline-"))
    tree, site, out = folder / "tree", folder / "site", folder / "numpy"
    tree.mkdir()
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha], capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(tree)], check=True)
    subprocess.run([sys.executable, "-c", WRITE_MODULES, str(out), json.dumps(MODULES),
                    str(site)], cwd=folder, env={**os.environ, "PYTHONPATH": str(site)},
                   check=True)
    shutil.rmtree(tree)
    shutil.rmtree(site)
    return {name: out / f"{name}.py" for name in MODULES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline", metavar="SHA",
                        help="time against the code commit SHA generates, not PyTorch")
    parser.add_argument("--rounds", type=int, default=4, help="rounds against the baseline")
    args = parser.parse_args()
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(args.threads)

    import handwritten_numpy as handwritten
    import numpy as np
    import torch

    from tspec import api
    from tspec.codegen.generate import source
    from tspec.execution import checkpoints, weights
    from tspec.execution.loading import load_module, load_source

    torch.set_num_threads(args.threads)
    spec = api.read_spec(api.BUILTIN_SPEC)

    def median_time(function, repeat=args.repeat):
        function()                                   # warm-up
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            function()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def times_in_turn(functions, repeat=args.repeat, rounds=3):
        """Median times of functions measured in turn, a block of calls each per round, so
        that a slow spell of this shared machine falls on all alike. Each block starts with an
        untimed call: the libraries' thread pools wait for work in different ways, and the
        first call after another library ran pays for the switch."""
        times = [[] for _ in functions]
        for _ in range(rounds):
            for function, record in zip(functions, times):
                function()
                for _ in range(repeat):
                    start = time.perf_counter()
                    function()
                    record.append(time.perf_counter() - start)
        return [statistics.median(record) for record in times]

    def sgemm_rate(m, k, n):
        a = np.random.default_rng(0).standard_normal((m, k)).astype(np.float32)
        b = np.random.default_rng(1).standard_normal((k, n)).astype(np.float32)
        return 2 * m * k * n / median_time(lambda: a @ b) / 1e9

    def layer_flops(B, T_q, T_kv, d, d_ff):
        attention = 2 * B * T_q * d * d * 2 + 2 * B * T_kv * d * d * 2 + 4 * B * T_q * T_kv * d
        feed_forward = 4 * B * T_q * d * d_ff
        return attention + feed_forward

    def nested(flat):
        return weights.nest({k: v.astype(np.float32) for k, v in flat.items()})

    rows, compared = [], []
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, threads {args.threads}, "
          f"numpy {np.__version__}, torch {torch.__version__}, CPython "
          f"{platform.python_version()}")
    baseline = {name: load_module(path) for name, path in baseline_modules(args.baseline).items()
                } if args.baseline else None

    def against_baseline(name, ours, theirs):
        """Record ours() against theirs() (the baseline's), in rounds of five calls each, in
        turn: the medians of all calls, the median of the rounds' ratios (each of two blocks
        next to each other in time, so the machine's slower spells cancel), and the largest
        difference of their outputs."""
        rounds = [times_in_turn([ours, theirs], repeat=5, rounds=1) for _ in range(args.rounds)]
        ratio = statistics.median(mine / base for mine, base in rounds)
        difference = float(np.abs(ours() - theirs()).max())
        compared.append((name, statistics.median(mine for mine, _ in rounds),
                         statistics.median(base for _, base in rounds), ratio, difference))

    # 1. the base encoder layer
    torch.manual_seed(0)
    B, T, d, H, d_ff = 8, 128, 512, 8, 2048
    layer = torch.nn.TransformerEncoderLayer(d, H, d_ff, dropout=0.0, batch_first=True).eval()
    module = load_source(source(spec, MODULES["encoder_layer"]))
    state = {f"encoder.layers.0.{k}": v for k, v in layer.state_dict().items()}
    params = nested(checkpoints.from_torch_transformer(state, norm="post"))
    ours_params = params["encoder"]["layers"][0]
    x = np.random.default_rng(0).standard_normal((B, T, d)).astype(np.float32)
    L = np.zeros((1, B, T, T), dtype=np.float32)
    x_torch = torch.tensor(x)
    if baseline:
        against_baseline("base encoder layer (B=8, T=128)",
                         lambda: module.encoder_layer(x, L, ours_params, H=H),
                         lambda: baseline["encoder_layer"].encoder_layer(x, L, ours_params, H=H))
    else:
        with torch.inference_mode():
            reference = layer(x_torch).numpy()
            times = times_in_turn([lambda: module.encoder_layer(x, L, ours_params, H=H),
                                   lambda: layer(x_torch),
                                   lambda: handwritten.encoder_layer(x, L[0], ours_params, H)])
        differences = (
            np.abs(reference - module.encoder_layer(x, L, ours_params, H=H)).max(),
            np.abs(reference - handwritten.encoder_layer(x, L[0], ours_params, H)).max())
        rows.append(("base encoder layer (B=8, T=128)", *times,
                     layer_flops(B, T, T, d, d_ff), sgemm_rate(B * T, d, d_ff), *differences))

    # 2. the base encoder-decoder stacks, with source padding and without
    torch.manual_seed(1)
    B, T, N = 4, 128, 6
    model = torch.nn.Transformer(d, H, N, N, d_ff, dropout=0.0, batch_first=True).eval()
    model.encoder.norm = None
    model.decoder.norm = None
    module = load_source(source(spec, MODULES["stacks"]))
    params = nested(checkpoints.from_torch_transformer(model.state_dict(), norm="post"))
    rng = np.random.default_rng(1)
    src, tgt = (rng.standard_normal((B, T, d)).astype(np.float32) for _ in range(2))
    L_self = module.rt.log_mask(np.tri(T, T, dtype=bool)[None].repeat(B, 0), np.float32)[None]
    causal = torch.nn.Transformer.generate_square_subsequent_mask(T)
    src_torch, tgt_torch = torch.tensor(src), torch.tensor(tgt)
    flops = N * layer_flops(B, T, T, d, d_ff) + N * (layer_flops(B, T, T, d, d_ff)
                                                     + 8 * B * T * d * d + 4 * B * T * T * d)
    for padded in (True, False):
        keep = np.ones((B, T), dtype=bool)
        if padded:  # the last sequence is half padding
            keep[-1, T // 2:] = False
        L_enc = module.rt.log_mask(module.rt.padding_mask(keep, T), np.float32)[None]
        padding = torch.tensor(~keep) if padded else None

        def ours_stacks(L_enc=L_enc, module=module):
            memory = module.encoder(src, L_enc, params["encoder"], H=H)
            return module.decoder(tgt, L_self, memory, L_enc, params["decoder"], H=H)

        def theirs_stacks(padding=padding):
            return model(src_torch, tgt_torch, tgt_mask=causal, src_key_padding_mask=padding,
                         memory_key_padding_mask=padding, tgt_is_causal=True)

        def handwritten_stacks(L_enc=L_enc):
            return handwritten.encoder_decoder(src, tgt, L_enc[0], params, H)

        name = f"base encoder-decoder (B=4, T=T_dec=128){', padded' if padded else ''}"
        if baseline:
            against_baseline(name, ours_stacks,
                             lambda L_enc=L_enc: ours_stacks(L_enc, baseline["stacks"]))
            continue
        with torch.inference_mode():
            reference = theirs_stacks().numpy()
            times = times_in_turn([ours_stacks, theirs_stacks, handwritten_stacks])
        differences = (np.abs(reference - ours_stacks()).max(),
                       np.abs(reference - handwritten_stacks()).max())
        rows.append((name, *times, flops, sgemm_rate(B * T, d, d_ff), *differences))

    # 3. a GPT-2-small-shaped causal stack
    torch.manual_seed(2)
    B, T, d, H, d_ff, N = 1, 1024, 768, 12, 3072, 12
    layer = torch.nn.TransformerEncoderLayer(
        d, H, d_ff, dropout=0.0, batch_first=True, norm_first=True,
        activation=lambda v: torch.nn.functional.gelu(v, approximate="tanh"))
    stack = torch.nn.TransformerEncoder(layer, N, norm=torch.nn.LayerNorm(d),
                                        enable_nested_tensor=False).eval()
    module = load_source(source(spec, MODULES["causal"]))
    state = {k.replace("layers.", "encoder.layers.").replace("norm.", "encoder.norm."): v
             for k, v in stack.state_dict().items()}
    flat = checkpoints.from_torch_transformer(state, norm="pre")
    params = nested({k.replace("encoder.", "decoder.", 1): v for k, v in flat.items()})
    y = np.random.default_rng(2).standard_normal((B, T, d)).astype(np.float32)
    L_causal = module.rt.log_mask(np.tri(T, T, dtype=bool)[None], np.float32)[None]
    causal = torch.nn.Transformer.generate_square_subsequent_mask(T)
    y_torch = torch.tensor(y)
    if baseline:
        against_baseline("GPT-2-small causal stack (B=1, T=1024)",
                         lambda: module.decoder(y, L_causal, params["decoder"], H=H),
                         lambda: baseline["causal"].decoder(y, L_causal, params["decoder"], H=H))
        print(f"\nthis tree against {args.baseline}, in one process: {args.rounds} rounds of "
              "five calls each, in turn\n")
        print(f"{'shape':<48} {'ours':>9} {'baseline':>9} {'ratio':>6} {'rounds':>6} "
              f"{'max diff':>9}")
        for name, ours, theirs, ratio, difference in compared:
            print(f"{name:<48} {ours * 1000:7.1f}ms {theirs * 1000:7.1f}ms "
                  f"{ours / theirs:6.3f} {ratio:6.3f} {difference:9.1e}")
        print("\nours, baseline: median times of a round's block (an untimed call first); ratio: "
              "of those medians; rounds: the median of each round's ratio")
        return
    with torch.inference_mode():
        reference = stack(y_torch, mask=causal, is_causal=True).numpy()
        times = times_in_turn([lambda: module.decoder(y, L_causal, params["decoder"], H=H),
                               lambda: stack(y_torch, mask=causal, is_causal=True),
                               lambda: handwritten.causal_stack(y, params["decoder"], H)],
                              max(1, args.repeat // 2), rounds=2)
    differences = (
        np.abs(reference - module.decoder(y, L_causal, params["decoder"], H=H)).max(),
        np.abs(reference - handwritten.causal_stack(y, params["decoder"], H)).max())
    rows.append(("GPT-2-small causal stack (B=1, T=1024)", *times,
                 N * layer_flops(B, T, T, d, d_ff), sgemm_rate(B * T, d, d_ff), *differences))

    print()
    print(f"{'shape':<40} {'numpy':>9} {'torch':>9} {'ratio':>6} {'GFLOP/s':>8} "
          f"{'sgemm':>7} {'of sgemm':>8} {'max diff':>9} {'by hand':>9} {'ratio':>6} "
          f"{'of sgemm':>8} {'max diff':>9}")
    for name, ours, theirs, by_hand, flops, sgemm, difference, hand_difference in rows:
        rate, hand_rate = flops / ours / 1e9, flops / by_hand / 1e9
        print(f"{name:<40} {ours * 1000:7.1f}ms {theirs * 1000:7.1f}ms {ours / theirs:6.2f} "
              f"{rate:8.1f} {sgemm:7.1f} {rate / sgemm:8.0%} {difference:9.1e} "
              f"{by_hand * 1000:7.1f}ms {by_hand / theirs:6.2f} {hand_rate / sgemm:8.0%} "
              f"{hand_difference:9.1e}")
    print("\nratio: NumPy time / PyTorch eager time (below 1 is faster); GFLOP/s counts matrix "
          "products only; 'by hand': benchmarks/handwritten_numpy.py, a careful hand-written "
          "NumPy forward on BLAS's own threads, the yardstick for what NumPy reaches here.")


if __name__ == "__main__":
    main()
