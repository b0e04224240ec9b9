"""Incremental decoding with the generated NumPy code: a step's time with the key-value cache
extended in place (the generated `extend`) against the same module copying the whole cache at
every step (`numpy.concatenate`, what the code did before), side by side in one run.

    python benchmarks/decode_speed.py [--steps 10]

A GPT-2-small-shaped decoder (d_model 768, 12 heads, 12 layers, d_ff 3072, pre-LN, tanh GELU,
a vocabulary of 1000), float32, seeded random weights; batches of 1 and 8 sequences after
prompts of 128 and 1024 positions. Prints the median step time each way and their ratio.
"""

import argparse
import os
import platform
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    import numpy as np

    from tspec import api
    from tspec.execution.run import _prepare, with_run_defaults

    variant = with_run_defaults(api.load("transformer", [
        "arch=decoder_only", "d_model=768", "H=12", "N=12", "d_ff=3072", "V=1000",
        "norm=pre", "activation=gelu_tanh"]))
    prepared = _prepare(variant, "numpy", 0, "float32", False)   # the variant's own module
    model, params = prepared.module, prepared.params
    extend = model.rt.extend

    def copying(past, new, axis):
        return np.concatenate([past, new], axis=axis)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}, "
          f"CPython {platform.python_version()}\n")
    print(f"{'batch':>5} {'prompt':>6} {'extend':>9} {'copying':>9} {'ratio':>6}")
    for B in (1, 8):
        for prompt in (128, 1024):
            rng = np.random.default_rng(0)
            u = rng.integers(0, 1000, (B, prompt + args.steps + 1))
            m = np.ones(u.shape, dtype=bool)
            times = {}
            for name, helper in (("copying", copying), ("extend", extend)):
                model.rt.extend = helper
                _, _, cache = model.prefill(u[:, :prompt], m[:, :prompt], params, H=12)
                model.decode_step(u[:, prompt:prompt + 1], m[:, :prompt + 1], params, cache)
                steps = []
                for t in range(prompt + 1, prompt + 1 + args.steps):
                    start = time.perf_counter()
                    model.decode_step(u[:, t:t + 1], m[:, :t + 1], params, cache)
                    steps.append(time.perf_counter() - start)
                times[name] = statistics.median(steps)
            model.rt.extend = extend
            print(f"{B:>5} {prompt:>6} {times['extend'] * 1e3:7.1f}ms "
                  f"{times['copying'] * 1e3:7.1f}ms {times['extend'] / times['copying']:6.2f}")
    print("\nratio: a step's time with extend / with copying (below 1 is faster)")


if __name__ == "__main__":
    main()
