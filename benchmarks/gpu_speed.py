"""The generated CuPy forward pass against PyTorch eager on one NVIDIA GPU, side by side.

    python benchmarks/gpu_speed.py [--dtype float32 float16] [--repeat 20] [--reference]
    python benchmarks/gpu_speed.py --cpu    # a smoke run on the CPU harness, tiny shapes

Three shapes at B=8, T=1024, the same weights on both sides, in float32 and float16: the base
encoder layer (d_model 512, 8 heads, d_ff 2048), the base encoder-decoder stacks (N=6, source
padding and causal target masks, T_dec=1024) and a GPT-2-small-shaped causal stack (d_model
768, 12 heads, 12 layers, pre-LN, tanh GELU). PyTorch runs nn.TransformerEncoderLayer /
nn.Transformer / nn.TransformerEncoder on CUDA under inference_mode: its default eager path,
which computes attention with its fused scaled-dot-product kernels. Matrix products run in the
tensors' own dtype on both sides (PyTorch's and CuPy's default: no TF32 for float32).

Each side is timed as a whole forward call between two device synchronisations (so launch
overhead counts), in blocks of calls taken in turn for several rounds; the medians are
compared. Prints the times, their ratio, the achieved TFLOP/s of the matrix products, the
device's own matrix-product rate measured in the same run for the same dtype, and the largest
difference from PyTorch's output relative to its scale. ``--reference`` also times the
generated code's traced path, which computes attention as the equations are written (the
scores stored, then the softmax) instead of the fused kernel, a pre-norm layer's residual sum
apart from its norm, and keeps every intermediate.

The untraced path runs the fused kernels: attention (attend_fused), each product's bias and
activation in one kernel after cuBLAS (project's epilogue: ReLU in the base shapes, tanh GELU
in GPT-2's), the residual sums added in the LayerNorm kernels (add_and_layer_norm in the post-LN
shapes; in GPT-2's pre-LN layers the attention residual written by the norm's kernel too).
``--cpu`` runs every row on the CPU harness (tests/support/cupy_on_cpu) and PyTorch on the CPU
at tiny sizes: it checks that the benchmark runs and agrees with PyTorch, not speed.
"""

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="+", default=["float32", "float16"],
                        choices=["float32", "float16"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reference", action="store_true",
                        help="also time the generated code's plain (unfused) path")
    parser.add_argument("--shapes", nargs="+", default=["layer", "stacks", "gpt2"],
                        choices=["layer", "stacks", "gpt2"])
    parser.add_argument("--cpu", action="store_true",
                        help="run on the CPU harness (tests/support/cupy_on_cpu), tiny shapes")
    args = parser.parse_args()

    import numpy as np
    import torch

    from tspec import api
    from tspec.codegen.generate import source
    from tspec.execution import checkpoints, weights

    spec = api.read_spec(api.BUILTIN_SPEC)
    if args.cpu:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from support import cupy_on_cpu
        cp = cupy_on_cpu.cupy
        load_source = cupy_on_cpu.load_source
        device = torch.device("cpu")
        B, T = 2, 16
        # (d_model, H, d_ff, N) of the base shapes and of GPT-2 small's, shrunk
        base, gpt2 = (32, 4, 64, 2), (48, 4, 96, 2)
        args.repeat, args.rounds = 1, 1
    else:
        import cupy as cp

        from tspec.execution.loading import load_source
        device = torch.device("cuda")
        B, T = 8, 1024
        base, gpt2 = (512, 8, 2048, 6), (768, 12, 3072, 12)

    def synchronise():
        if not args.cpu:
            torch.cuda.synchronize()
            cp.cuda.Device().synchronize()

    def block_time(function, repeat):
        synchronise()
        start = time.perf_counter()
        for _ in range(repeat):
            function()
        synchronise()
        return (time.perf_counter() - start) / repeat

    def paired_times(sides, repeat=args.repeat, rounds=args.rounds):
        """Median per-call time of each function, timed in turn: per round, a warm-up call
        and then ``repeat`` calls in blocks of a few."""
        times = [[] for _ in sides]
        for _ in range(rounds):
            for function, record in zip(sides, times):
                function()
                for _ in range(max(1, repeat // 4)):
                    record.append(block_time(function, 4))
        return [statistics.median(t) for t in times]

    def matmul_rate(dtype, n=8192):
        n = 64 if args.cpu else n
        a, b = (cp.asarray(np.random.default_rng(seed).standard_normal((n, n), dtype=np.float32)
                           .astype(dtype)) for seed in (0, 1))
        seconds = statistics.median(block_time(lambda: a @ b, 5) for _ in range(5))
        return 2 * n ** 3 / seconds / 1e12

    def layer_flops(B, T_q, T_kv, d, d_ff):
        attention = 2 * B * T_q * d * d * 2 + 2 * B * T_kv * d * d * 2 + 4 * B * T_q * T_kv * d
        return attention + 4 * B * T_q * d * d_ff

    def ours_params(flat, dtype):
        return weights.nest({k: cp.asarray(v.astype(dtype)) for k, v in flat.items()})

    def relative(ours, theirs):
        theirs = theirs.float().cpu().numpy().astype(np.float64)
        ours = cp.asnumpy(ours).astype(np.float64)
        return float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30))

    def generated(choices):
        return load_source(source(spec, choices, "cupy"), private=True)

    def encoder_layer_row(dtype, peak):
        torch.manual_seed(0)
        d, H, d_ff, _ = base
        layer = torch.nn.TransformerEncoderLayer(d, H, d_ff, dropout=0.0, batch_first=True)
        layer = layer.eval().to(device, getattr(torch, dtype.name))
        module = generated({"arch": "encoder_only", "attention_bias": "all"})
        state = {f"encoder.layers.0.{k}": v for k, v in layer.state_dict().items()}
        params = ours_params(checkpoints.from_torch_transformer(state, norm="post"), dtype)
        params = params["encoder"]["layers"][0]
        x = cp.asarray(np.random.default_rng(0).standard_normal((B, T, d)).astype(dtype))
        L = cp.zeros((1, B, T, T), dtype=dtype)
        x_torch = torch.as_tensor(x, device=device)
        sides = [lambda: module.encoder_layer(x, L, params, H=H), lambda: layer(x_torch)]
        if args.reference:
            sides.append(lambda: module.encoder_layer(x, L, params, H=H, trace={}))
        with torch.inference_mode():
            difference = relative(sides[0](), sides[1]())
            times = paired_times(sides)
        return (f"base encoder layer, {dtype.name}", times, layer_flops(B, T, T, d, d_ff), peak,
                difference)

    def encoder_decoder_row(dtype, peak):
        torch.manual_seed(1)
        d, H, d_ff, N = base
        torch_dtype = getattr(torch, dtype.name)
        model = torch.nn.Transformer(d, H, N, N, d_ff, dropout=0.0, batch_first=True)
        model.encoder.norm = None
        model.decoder.norm = None
        model = model.eval().to(device, torch_dtype)
        module = generated({"arch": "encoder_decoder", "attention_bias": "all"})
        flat = checkpoints.from_torch_transformer(model.state_dict(), norm="post")
        params = ours_params(flat, dtype)
        rng = np.random.default_rng(1)
        src, tgt = (cp.asarray(rng.standard_normal((B, T, d)).astype(dtype)) for _ in range(2))
        keep = np.ones((B, T), dtype=bool)
        keep[-1, T // 2:] = False
        L_enc = module.rt.log_mask(module.rt.padding_mask(cp.asarray(keep), T), dtype)[None]
        L_self = module.rt.log_mask(cp.tri(T, T, dtype=bool)[None].repeat(B, 0), dtype)[None]

        def ours(trace=None):
            memory = module.encoder(src, L_enc, params["encoder"], H=H, trace=trace)
            return module.decoder(tgt, L_self, memory, L_enc, params["decoder"], H=H,
                                  trace=trace)

        padding = torch.as_tensor(~keep, device=device)
        causal = torch.nn.Transformer.generate_square_subsequent_mask(T, device=device,
                                                                      dtype=torch_dtype)
        src_torch, tgt_torch = (torch.as_tensor(a, device=device) for a in (src, tgt))

        def theirs():
            return model(src_torch, tgt_torch, tgt_mask=causal, src_key_padding_mask=padding,
                         memory_key_padding_mask=padding, tgt_is_causal=True)

        sides = [ours, theirs] + ([lambda: ours(trace={})] if args.reference else [])
        with torch.inference_mode():
            difference = relative(ours(), theirs())
            times = paired_times(sides, max(4, args.repeat // 4))
        flops = N * layer_flops(B, T, T, d, d_ff) + N * (
            layer_flops(B, T, T, d, d_ff) + 8 * B * T * d * d + 4 * B * T * T * d)
        return f"base encoder-decoder, {dtype.name}", times, flops, peak, difference

    def gpt2_row(dtype, peak):
        torch.manual_seed(2)
        d, H, d_ff, N = gpt2
        torch_dtype = getattr(torch, dtype.name)
        layer = torch.nn.TransformerEncoderLayer(
            d, H, d_ff, dropout=0.0, batch_first=True, norm_first=True,
            activation=lambda v: torch.nn.functional.gelu(v, approximate="tanh"))
        stack = torch.nn.TransformerEncoder(layer, N, norm=torch.nn.LayerNorm(d),
                                            enable_nested_tensor=False)
        stack = stack.eval().to(device, torch_dtype)
        module = generated({"arch": "decoder_only", "norm": "pre", "activation": "gelu_tanh",
                            "attention_bias": "all"})
        state = {k.replace("layers.", "encoder.layers.").replace("norm.", "encoder.norm."): v
                 for k, v in stack.state_dict().items()}
        flat = checkpoints.from_torch_transformer(state, norm="pre")
        params = ours_params({k.replace("encoder.", "decoder.", 1): v for k, v in flat.items()},
                             dtype)
        y = cp.asarray(np.random.default_rng(2).standard_normal((B, T, d)).astype(dtype))
        L_causal = module.rt.log_mask(cp.tri(T, T, dtype=bool)[None], dtype)[None]
        causal = torch.nn.Transformer.generate_square_subsequent_mask(T, device=device,
                                                                      dtype=torch_dtype)
        y_torch = torch.as_tensor(y, device=device)
        sides = [lambda: module.decoder(y, L_causal, params["decoder"], H=H),
                 lambda: stack(y_torch, mask=causal, is_causal=True)]
        if args.reference:
            sides.append(lambda: module.decoder(y, L_causal, params["decoder"], H=H, trace={}))
        with torch.inference_mode():
            difference = relative(sides[0](), sides[1]())
            times = paired_times(sides, max(4, args.repeat // 4))
        return (f"GPT-2-small causal stack, {dtype.name}", times,
                N * layer_flops(B, T, T, d, d_ff), peak, difference)

    name = "the CPU harness" if args.cpu else torch.cuda.get_device_name()
    print(f"device: {name}, CUDA {torch.version.cuda}, cupy {getattr(cp, '__version__', '-')}, torch "
          f"{torch.__version__}, numpy {np.__version__}, CPython {platform.python_version()}")
    measure = {"layer": encoder_layer_row, "stacks": encoder_decoder_row, "gpt2": gpt2_row}
    rows = []
    for dtype_name in args.dtype:
        dtype = np.dtype(dtype_name)
        peak = matmul_rate(dtype)
        for shape in args.shapes:
            rows.append(measure[shape](dtype, peak))
            print(f"measured {rows[-1][0]}", flush=True)

    print()
    head = f"{f'shape (B={B}, T={T})':<40} {'cupy':>9} {'torch':>9} {'ratio':>6}"
    if args.reference:
        head += f" {'plain':>9} {'ratio':>6}"
    print(head + f" {'TFLOP/s':>8} {'peak':>6} {'of peak':>7} {'rel diff':>9}")
    for label, times, flops, peak, difference in rows:
        ours, theirs = times[:2]
        line = f"{label:<40} {ours * 1e3:7.2f}ms {theirs * 1e3:7.2f}ms {ours / theirs:6.2f}"
        if args.reference:
            line += f" {times[2] * 1e3:7.2f}ms {times[2] / theirs:6.2f}"
        rate = flops / ours / 1e12
        print(line + f" {rate:8.1f} {peak:6.1f} {rate / peak:7.0%} {difference:9.1e}")
    print("\nratio: generated CuPy time / PyTorch eager time (below 1 is faster); TFLOP/s counts "
          f"matrix products only; peak: an {64 if args.cpu else 8192}^3 matrix product in the "
          "same dtype, same run.")


if __name__ == "__main__":
    main()
