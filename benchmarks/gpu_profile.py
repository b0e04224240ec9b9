"""Where the generated CuPy forward spends its GPU time: every kernel of one call, timed by
the CUDA profiler (through torch.profiler, which records CuPy's launches too).

    python benchmarks/gpu_profile.py [--dtype float16] [--shape layer|gpt2]

Prints the kernels by total GPU time for one base encoder layer (B=8, T=1024) or one
GPT-2-small layer (pre-LN, tanh GELU, causal), after a warm-up call: the untraced path, with
its fused kernels (attend_fused, project's bias_activation epilogue, the residual sums added
in layer_norm_rows).
"""

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16", choices=["float32", "float16"])
    parser.add_argument("--shape", default="layer", choices=["layer", "gpt2"])
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()

    import cupy as cp
    import numpy as np
    import torch

    from tspec import api
    from tspec.codegen.generate import source
    from tspec.execution import weights
    from tspec.execution.loading import load_source

    spec = api.read_spec(api.BUILTIN_SPEC)
    B, T = 8, 1024
    if args.shape == "layer":
        choices = {"arch": "encoder_only", "attention_bias": "all"}
        sizes = {"d_model": 512, "H": 8, "d_ff": 2048, "N": 1, "V": 8}
    else:
        choices = {"arch": "decoder_only", "norm": "pre", "activation": "gelu_tanh",
                   "attention_bias": "all"}
        sizes = {"d_model": 768, "H": 12, "d_ff": 3072, "N": 1, "V": 8}
    dtype = np.dtype(args.dtype)
    module = load_source(source(spec, choices, "cupy"))
    flat = weights.flatten(weights.random_params(weights.expected_shapes(spec, choices, sizes),
                                                 0, dtype))
    params = weights.nest({k: cp.asarray(v) for k, v in flat.items()})
    stack = params["encoder" if "encoder" in params else "decoder"]["layers"][0]
    x = cp.asarray(np.random.default_rng(0).standard_normal((B, T, sizes["d_model"]))
                   .astype(dtype))
    mask = np.tri(T, T, dtype=bool) if args.shape == "gpt2" else np.ones((T, T), dtype=bool)
    L = module.rt.log_mask(cp.asarray(mask)[None, None], dtype)
    # a decoder-only model's layer is its decoder's
    layer = module.decoder_layer if args.shape == "gpt2" else module.encoder_layer

    def call():
        return layer(x, L, stack, H=sizes["H"])

    call()
    cp.cuda.Device().synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                            torch.profiler.ProfilerActivity.CPU]) as profile:
        call()
        cp.cuda.Device().synchronize()
    print(profile.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows,
                                       max_name_column_width=70))


if __name__ == "__main__":
    main()
