"""The CPU harness for the CuPy code (tests/support/cupy_on_cpu): that it runs every kernel the
generator emits, that it is faithful to CUDA where the kernels rely on it, that it catches what
a GPU would get wrong, and that the stand-in for CuPy keeps CuPy's rules.

- Every CUDA kernel in the generated CuPy code has checks in support/kernel_checks.py (which
  test_cupy.py runs on the CPU and on a GPU where one is), and a wrong index in one (an
  off-by-one in a row's stride, a lane's stride, a reduction step, a mask's stride, the
  variance's divisor) makes those checks fail.
- The built-ins: shuffles of every kind and width, votes, __syncthreads and shared memory,
  two- and three-dimensional grids and blocks, atomics, half precision. These run on a GPU too,
  so there they check the harness's expectations against the hardware.
- Launches that touch memory outside their arguments, diverge in a warp-synchronous call, trap
  or take arguments of the wrong kind or size stop with a KernelError that says so; sources
  that do not compile and inline PTX without a CPU stand-in are refused by name.
- The stand-in refuses host (NumPy) arrays where CuPy does, and its cuBLAS call reads memory
  by the pointers, leading dimensions and strides it is given.
"""

import ctypes
import re
import sys

import numpy as np
import pytest
from support import cupy_on_cpu, kernel_checks
from support.arrays import CUPY_ON_CPU, DEVICES, Arrays, needs_compiler, to_numpy
from support.cupy_on_cpu import CompileError, KernelError, kernels, standin

from tspec import api
from tspec.codegen.generate import runtime_source, source
from tspec.codegen.rendering.render import runtime_version, stamped

SPEC = api.read_spec(api.BUILTIN_SPEC)
cp = cupy_on_cpu.cupy


# ---------------------------------------------------------------------------------------------
# Every kernel the generator emits is checked, and a wrong index in one fails its checks

# the kernels' checks (test_cupy.py runs each, and the kernels on drawn inputs)
KERNEL_CHECKS = {
    "softmax_rows": [
        (kernel_checks.softmax_kernel_matches_numpy_on_rows_of_any_length,
         {"dtype": "float32", "tolerance": 1e-6, "n": n}) for n in (1, 7, 32, 33, 1000)] + [
        (kernel_checks.masked_softmax_follows_the_masks_broadcasting,
         {"dtype": "float32", "mask_shape": shape})
        for shape in [(1, 3, 5, 6), (4, 3, 5, 6), (1, 1, 5, 6), (3, 5, 6), (1, 3, 1, 6)]] + [
        (kernel_checks.softmax_kernel_edge_cases, {"dtype": "float32"})],
    "layer_norm_rows": [
        (kernel_checks.layer_norm_kernel_matches_numpy, {"dtype": "float32",
                                                          "tolerance": 1e-5}),
        (kernel_checks.layer_norm_kernel_edge_cases, {"dtype": "float32"})] + [
        (kernel_checks.residual_norm_matches_numpy, {"name": "layer_norm", "dtype": dtype,
                                                     "n": n})
        for dtype in ("float32", "float16") for n in (1, 7, 33, 1000)],
    "rms_norm_rows": [
        (kernel_checks.rms_norm_kernel_matches_numpy, {"dtype": dtype, "n": n})
        for dtype in ("float32", "float16") for n in (1, 7, 33, 1000)] + [
        (kernel_checks.residual_norm_matches_numpy, {"name": "rms_norm", "dtype": dtype,
                                                     "n": n, "keep_sum": n % 2 == 1})
        for dtype in ("float32", "float16") for n in (1, 7, 33, 1000)],
    "relu": [(kernel_checks.activation_kernel_matches_numpy, {"name": "relu", "dtype": dtype})
             for dtype in ("float32", "float16")],
    "silu": [(kernel_checks.activation_kernel_matches_numpy, {"name": "silu", "dtype": dtype})
             for dtype in ("float32", "float16")],
    "glu": [(kernel_checks.glu_matches_numpy, {"name": name, "dtype": dtype, "n": n})
            for name in ("silu", "gelu") for dtype in ("float32", "float16") for n in (1, 33)],
    "bias_activation": [
        (kernel_checks.epilogue_matches_numpy, {"name": name, "dtype": dtype, "n": n})
        for name in ("relu", "silu", "gelu", "gelu_tanh") for dtype in ("float32", "float16")
        for n in (1, 7, 33, 1000)],
    "gelu": [(kernel_checks.gelu_kernels_against_the_normal_cdf,
              {"dtype": "float64", "tolerance": 1e-15})],
    "gelu_tanh": [(kernel_checks.gelu_kernels_against_the_normal_cdf,
                   {"dtype": "float64", "tolerance": 1e-15})],
    "attend_tiles": [
        (kernel_checks.attention_kernel_matches_numpy,
         {"dtype": "float32", "d_k": d_k, "T_q": T_q, "T_kv": T_kv, "mask": mask})
        for d_k, T_q, T_kv, mask in [(17, 20, 45, "random"), (64, 33, 70, "padding"),
                                     (8, 19, 19, "causal"), (256, 17, 20, "none")]],
    "attend_tiles_wmma": [
        (kernel_checks.attention_kernel_matches_numpy,
         {"dtype": "float16", "d_k": d_k, "T_q": T_q, "T_kv": T_kv, "mask": mask})
        for d_k, T_q, T_kv, mask in [(17, 20, 45, "random"), (64, 33, 70, "padding"),
                                     (8, 19, 19, "causal"), (128, 17, 20, "none")]],
    "attend_split": [
        (kernel_checks.attention_kernel_matches_numpy,
         {"dtype": "float32", "d_k": d_k, "T_q": 1, "T_kv": T_kv, "mask": mask})
        for d_k, T_kv, mask in [(24, 300, "padding"), (40, 65, "none"), (1, 7, "random")]],
}
KERNEL_CHECKS["attend_combine"] = KERNEL_CHECKS["attend_split"]


def kernel_names(text: str) -> set[str]:
    """The CUDA kernels of a generated module: __global__ functions and element-wise kernels."""
    names = set(re.findall(r"__global__\s+void\s+(\w+)", text))
    return names | set(re.findall(r'ElementwiseKernel\(.*?\n\s*"(\w+)", preamble=', text,
                                  re.DOTALL))


def test_every_kernel_the_generator_emits_has_checks():
    """The kernels of the CuPy runtime (which holds every helper) and of every committed CuPy
    module are exactly those KERNEL_CHECKS (support/kernel_checks.py) checks: a new kernel
    fails here until it has checks of its own."""
    texts = [path.read_text() for path in (api.checkout() / "generated" / "cupy").glob("*.py")]
    texts.append(runtime_source("cupy"))
    found = set().union(*(kernel_names(text) for text in texts))
    assert found == set(KERNEL_CHECKS)


class Mutant(Arrays):
    """The stand-in's backend with one change made in the kernel text of the generated runtime
    (its VERSION, and the model's, made to match)."""

    def __init__(self, old: str, new: str):
        super().__init__("cupy-on-cpu")
        self.old, self.new = old, new
        self.applied = 0          # modules loaded with the change made

    def load(self, text, *, typecheck=False, private=False):
        runtime = runtime_source("cupy")
        if self.old not in runtime:
            return super().load(text, typecheck=typecheck, private=private)
        self.applied += 1
        changed = stamped(runtime.replace(self.old, self.new, 1))
        text = text.replace(runtime_version(runtime), runtime_version(changed), 1)
        return cupy_on_cpu.load_source(text, typecheck=typecheck, private=private,
                                       runtime_text=changed)


MUTANTS = {
    "softmax: a row's stride one too long when reading": (
        "softmax_rows", "const T* in = x + row * n;", "const T* in = x + row * (n + 1);"),
    "softmax: a row's stride one too short when writing": (
        "softmax_rows", "T* out = y + row * n;", "T* out = y + row * (n - 1);"),
    "softmax: a lane's stride 31": ("softmax_rows", "j < n; j += 32) {\n        const A m",
                                    "j < n; j += 31) {\n        const A m"),
    "softmax: the lanes' reduction from offset 8": (
        "softmax_rows", "for (int offset = 16; offset > 0; offset /= 2) {\n        const A other",
        "for (int offset = 8; offset > 0; offset /= 2) {\n        const A other"),
    "softmax: the mask's last two strides swapped": (
        "softmax_rows", "i2 * stride2 + i3 * stride3;", "i2 * stride3 + i3 * stride2;"),
    "softmax: four rows to a block counted as three": (
        "softmax_rows", ("blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;\n    if (row >= "
                        "rows) return;\n    const int lane = threadIdx.x % 32;\n    const T* in "
                        "= x + row * n;\n    const T* add"),
        ("blockIdx.x * (blockDim.x / 32 - 1) + threadIdx.x / 32;\n    if (row >= rows) "
        "return;\n    const int lane = threadIdx.x % 32;\n    const T* in = x + row * n;\n    "
        "const T* add")),
    "layer_norm: a row's stride one too long when reading": (
        "layer_norm_rows", ("const T* in = x + row * n;\n    const T* add = r + row * n;\n    "
        "T* sums = total + row * n;\n    const A first"),
        ("const T* in = x + row * (n + 1);\n    const T* add = r + row * n;\n    "
        "T* sums = total + row * n;\n    const A first")),
    "layer_norm: a row's stride one too short when writing": (
        "layer_norm_rows", ("T* out = y + row * n;\n    for (long long j = lane; j < n; j += 32) "
        "{\n        store(out + j, (load(s + j) - mean)"),
        ("T* out = y + row * (n - 1);\n    for (long long j = lane; j < n; j += 32) "
        "{\n        store(out + j, (load(s + j) - mean)")),
    "layer_norm: the variance over n - 1": (
        "layer_norm_rows", "warp_sum(squares) / A(n) + A(eps));\n    const A scale = root >",
        "warp_sum(squares) / A(n - 1) + A(eps));\n    const A scale = root >"),
    "layer_norm: the residual's row stride one too short": (
        "layer_norm_rows", ("const T* add = r + row * n;\n    T* sums = total + row * n;\n    "
        "const A first"), ("const T* add = r + row * (n - 1);\n    T* sums = total + row * n;"
        "\n    const A first")),
    "layer_norm: the sum's later passes read x, not the sum": (
        "layer_norm_rows", "const T* s = ADD ? sums : in;\n    const A sum",
        "const T* s = in;\n    const A sum"),
    "rms_norm: a row's stride one too long when reading": (
        "rms_norm_rows", ("const T* in = x + row * n;\n    const T* add = r + row * n;\n    "
        "T* sums = total + row * n;\n    A squares"),
        ("const T* in = x + row * (n + 1);\n    const T* add = r + row * n;\n    "
        "T* sums = total + row * n;\n    A squares")),
    "rms_norm: the mean square over n - 1": (
        "rms_norm_rows", "warp_sum(squares) / A(n) + A(eps));\n    const A scale = A(1)",
        "warp_sum(squares) / A(n - 1) + A(eps));\n    const A scale = A(1)"),
    "rms_norm: the sum written one row short": (
        "rms_norm_rows", "T* sums = total + row * n;\n    A squares",
        "T* sums = total + row * (n - 1);\n    A squares"),
    "rms_norm: a lane's stride 31": (
        "rms_norm_rows", ("j < n; j += 32) {\n        A v = load(in + j);\n        if (ADD) {\n"
        "            v = rounded(v + load(add + j), in);\n            store(sums + j, v);\n"
        "        }\n        squares"),
        ("j < n; j += 31) {\n        A v = load(in + j);\n        if (ADD) {\n"
        "            v = rounded(v + load(add + j), in);\n            store(sums + j, v);\n"
        "        }\n        squares")),
    "bias_activation: the bias not added": (
        "bias_activation", "(A(T(A(p) + A(b))))", "(A(T(A(p))))"),
    "glu: the gate times itself": ("glu", "(A(g)))) * A(x));", "(A(g)))) * A(g));"),
    "silu: sigmoid's denominator off by one": (
        "silu", "/ (A(1) + e))", "/ (A(2) + e))"),
    "relu: negative values kept": ("relu", "v < A(0) ? A(0) : v", "v < A(-1) ? A(0) : v"),
    "attend_tiles: the key tile's stride one too short": (
        "attend_tiles", "load(kb + (j0 + j) * k_row + c)", "load(kb + (j0 + j) * (k_row - 1) + c)"),
    "attend_tiles: the mask's row and column strides swapped": (
        "attend_tiles", "load(mb + r * m_row + (j0 + j) * m_col) : none;\n                visible",
        "load(mb + r * m_col + (j0 + j) * m_row) : none;\n                visible"),
    "attend_tiles: the running sum not rescaled": (     # (attend_tiles' comes first)
        "attend_tiles", "total_of[r] = total_of[r] * scale + sum;",
        "total_of[r] = total_of[r] + sum;"),
    "attend_tiles: the output not rescaled": (
        "attend_tiles", "A sum = o[i] * scale_of[r];", "A sum = o[i];"),
    "attend_tiles_wmma: k read as row-major (k, not k^T)": (
        "attend_tiles_wmma", "wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kt;",
        "wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> kt;"),
    "attend_tiles_wmma: the output's leading dimension one row short": (
        "attend_tiles_wmma", "wmma::store_matrix_sync(so + n * 16, sums, OLD,",
        "wmma::store_matrix_sync(so + n * 16, sums, OLD - 4,"),
    "attend_tiles_wmma: the output not rescaled": (
        "attend_tiles_wmma", "so[(e / 16) * OLD + n * 16 + e % 16] *=\n                scale_of[e / 16];",
        "so[(e / 16) * OLD + n * 16 + e % 16] *=\n                1.0f;"),
    "attend_split: a warp's keys four apart counted as three": (
        "attend_split", "j < end; j += WARPS)", "j < end; j += WARPS - 1)"),
    "attend_split: the last split's end past the keys": (
        "attend_split", "t_kv < begin + chunk ? t_kv : begin + chunk", "begin + chunk"),
    "attend_combine: the splits' sums not rescaled": (
        "attend_combine", "total += stats[2 * at + 1] * scale;", "total += stats[2 * at + 1];"),
    "gelu: 1/sqrt(2) to 9 digits": ("gelu", "erf(v * A(0.7071067811865475))",
                                    "erf(v * A(0.707106781))"),
    "gelu_tanh: the cubic's coefficient to 6 digits": (
        "gelu_tanh", "A(0.035677408136300125) * v * v", "A(0.0356774) * v * v"),
}


@needs_compiler
@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_a_wrong_index_in_a_kernel_fails_its_checks(mutant):
    """Each mutant of a kernel's source (the generated text, changed before it is compiled)
    fails at least one of that kernel's checks: with wrong numbers, or with the harness's
    KernelError for memory read or written outside an argument."""
    kernel, old, new = MUTANTS[mutant]
    device = Mutant(old, new)
    failures = []
    for check, parameters in KERNEL_CHECKS[kernel]:
        try:
            check(device, **parameters)
        except (AssertionError, KernelError) as failure:
            failures.append(failure)
    assert device.applied, f"{mutant}: no check loaded the changed kernel"
    assert failures, f"{mutant}: every check of {kernel} passed"


def test_a_mutant_whose_text_is_in_no_kernel_is_never_applied():
    # the check above asserts that its mutant was applied: before, a mutant whose text had
    # gone from the kernels failed with an AssertionError, which counted as a check it failed
    device = Mutant("this text is in no kernel", "")
    check, parameters = KERNEL_CHECKS["gelu"][0]
    check(device, **parameters)
    assert device.applied == 0


@needs_compiler
def test_an_off_by_one_in_a_rows_stride_reads_past_the_argument():
    """The issue's example: x + row * (n + 1) reads the last rows past the end of x, which
    the harness stops, naming the kernel, the argument and how far past it the read was."""
    device = Mutant(*MUTANTS["softmax: a row's stride one too long when reading"][1:])
    x = np.random.default_rng(0).standard_normal((9, 33)).astype(np.float32)
    with pytest.raises(KernelError, match=r"^softmax_rows<float> read byte (\d+) of argument "
                                          r"x, outside the 1188 bytes it was given$") as raised:
        kernel_checks.generated(device).rt.softmax(cp.asarray(x))
    assert 1188 <= int(re.search(r"byte (\d+)", str(raised.value)).group(1)) < 1188 + 9 * 4


# ---------------------------------------------------------------------------------------------
# CUDA's built-ins, against what CUDA defines (on a GPU too)

def launch(device, code, name, grid, block, *arguments):
    kernel = device.xp.RawKernel(code, name)
    kernel(grid, block, arguments)


SHUFFLES = r"""
extern "C" __global__ void shuffles(const float* x, float* y, int width) {
    const int lane = threadIdx.x;
    const float v = x[lane];
    y[0 * 32 + lane] = __shfl_sync(0xffffffffu, v, 5, width);
    y[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, v, 3, width);
    y[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, 3, width);
    y[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, 6, width);
    y[4 * 32 + lane] = __all_sync(0xffffffffu, v > 3.0f);
    y[5 * 32 + lane] = __any_sync(0xffffffffu, v > 30.0f);
    y[6 * 32 + lane] = (float)(__ballot_sync(0xffffffffu, lane % 3 == 0) % 1000);
}
"""


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("width", [32, 16, 8, 4])
def test_shuffles_and_votes_as_cuda_defines_them(device, width):
    """__shfl_sync takes lane src % width of the lane's segment of ``width`` lanes; up and
    down keep a lane's own value where the source is outside its segment; xor reads earlier
    segments but not later ones; the votes see every lane."""
    xp = device.xp
    x = np.arange(32, dtype=np.float32) + 1
    y = xp.zeros(7 * 32, dtype=xp.float32)
    launch(device, SHUFFLES, "shuffles", (1,), (32,), xp.asarray(x), y, width)
    y = to_numpy(y).reshape(7, 32)
    lanes = np.arange(32)
    start = lanes - lanes % width
    np.testing.assert_array_equal(y[0], x[start + 5 % width])
    np.testing.assert_array_equal(y[1], x[np.where(lanes - start >= 3, lanes - 3, lanes)])
    np.testing.assert_array_equal(y[2], x[np.where(lanes - start + 3 < width, lanes + 3, lanes)])
    other = lanes ^ 6
    np.testing.assert_array_equal(y[3], x[np.where(other < start + width, other, lanes)])
    np.testing.assert_array_equal(y[4], 0.0)
    np.testing.assert_array_equal(y[5], 1.0)
    ballot = sum(1 << lane for lane in range(0, 32, 3))
    np.testing.assert_array_equal(y[6], float(ballot % 1000))


BLOCKS = r"""
extern "C" __global__ void blocks(float* reversed, int* where, int* counts,
                                  unsigned long long* total) {
    __shared__ float row[96];
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    row[t] = (float)(block * 1000 + t);
    __syncthreads();
    reversed[block * threads + t] = row[threads - 1 - t];
    where[block * threads + t] = ((blockIdx.z * 10 + blockIdx.y) * 10 + blockIdx.x) * 1000
                                 + (threadIdx.z * 10 + threadIdx.y) * 10 + threadIdx.x;
    const int below = __syncthreads_count(t < 10);
    if (t == 0) counts[block] = below;
    atomicAdd(total, (unsigned long long)(t + 1));
}
"""


@pytest.mark.parametrize("device", DEVICES)
def test_blocks_shared_memory_and_atomics_as_cuda_defines_them(device):
    """A grid of 2 x 3 x 1 blocks of 4 x 3 x 2 threads: each block reverses its threads'
    values through shared memory across __syncthreads, every thread finds its indices in
    x-fastest order, __syncthreads_count counts a predicate over the block, and atomicAdd
    sums over every thread of every block."""
    xp = device.xp
    threads, count = 24, 6
    reversed_, where = xp.zeros(threads * count, xp.float32), xp.zeros(threads * count, xp.int32)
    counts, total = xp.zeros(count, xp.int32), xp.zeros(1, xp.uint64)
    launch(device, BLOCKS, "blocks", (2, 3, 1), (4, 3, 2), reversed_, where, counts, total)
    t = np.arange(threads)
    blocks = np.arange(count)
    np.testing.assert_array_equal(to_numpy(reversed_).reshape(count, threads),
                                  blocks[:, None] * 1000 + t[::-1])
    z, y, x = np.unravel_index(t, (2, 3, 4))
    bz, by, bx = np.unravel_index(blocks, (1, 3, 2))
    expected = ((bz * 10 + by) * 10 + bx)[:, None] * 1000 + ((z * 10 + y) * 10 + x)
    np.testing.assert_array_equal(to_numpy(where).reshape(count, threads), expected)
    np.testing.assert_array_equal(to_numpy(counts), 10)
    assert int(to_numpy(total)[0]) == count * threads * (threads + 1) // 2


HALVES = r"""
#include <cuda_fp16.h>
extern "C" __global__ void halves(const float* x, unsigned short* bits, float* back, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const __half h = __float2half_rn(x[i]);
    bits[i] = __half_as_ushort(h);
    back[i] = __half2float(h);
}
"""


@pytest.mark.parametrize("device", DEVICES)
def test_half_precision_rounds_as_cuda_does(device):
    """float to half rounds to nearest, ties to even, overflows to inf, keeps subnormals:
    the bits NumPy's float16 gives."""
    xp = device.xp
    x = np.array([1.0009765625, 1.00048828125, 1.00146484375, 65504.0, 65520.0, 1e-7, -2.5,
                  np.inf, 5.96e-8], dtype=np.float32)
    bits, back = xp.zeros(x.size, xp.uint16), xp.zeros(x.size, xp.float32)
    launch(device, HALVES, "halves", (2,), (8,), xp.asarray(x), bits, back, x.size)
    with np.errstate(over="ignore"):                         # 65520 is inf in float16
        half = x.astype(np.float16)
    np.testing.assert_array_equal(to_numpy(bits), half.view(np.uint16))
    np.testing.assert_array_equal(to_numpy(back), half.astype(np.float32))


# ---------------------------------------------------------------------------------------------
# What a GPU would get wrong, stopped and said

WMMA = r"""
#include <mma.h>
using namespace nvcuda;
// d = a b + c for 16 x 16 matrices, a and c row by row, b column by column (b^T's rows),
// through shared memory; one warp
extern "C" __global__ void products(const __half* a, const __half* b, const float* c,
                                    float* d, int offset) {
    __shared__ __align__(32) float tile[16 * 20 + 8];
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(tile + offset, fc, 20, wmma::mem_row_major);
    __syncwarp();
    for (int e = threadIdx.x; e < 256; e += 32) d[e] = tile[offset + (e / 16) * 20 + e % 16];
}
"""


@pytest.mark.parametrize("device", DEVICES)
def test_warp_matrix_multiplies_sum_in_the_accumulators_type(device):
    """nvcuda::wmma (the harness's include/mma.h): a 16 x 16 x 16 product of float16
    matrices, b read column by column, added to c, summed in float32, stored row by row with
    a leading dimension of 20 into shared memory: a float16 product of every pair is exact in
    float32, so the sums are float64's up to float32's rounding."""
    xp = device.xp
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((16, 16)).astype(np.float16) for _ in range(2))
    c = rng.standard_normal((16, 16)).astype(np.float32)
    d = xp.zeros(256, dtype=xp.float32)
    launch(device, WMMA, "products", (1,), (32,), xp.asarray(a),
           xp.asarray(np.ascontiguousarray(b.T)), xp.asarray(c), d, np.int32(0))
    expected = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(to_numpy(d).reshape(16, 16), expected, rtol=1e-6, atol=1e-5)


@needs_compiler
def test_a_warp_matrix_multiply_off_256_bits_is_refused():
    with pytest.raises(KernelError, match=r"^store_matrix_sync: pointer 0x[0-9a-f]+ is not "
                                          r"aligned to 256 bits$"):
        run_on_cpu(WMMA, "products", (1,), (32,), *(cp.zeros(256, t) for t in (cp.float16,
                   cp.float16, cp.float32, cp.float32)), np.int32(4))


@needs_compiler
def test_a_warp_matrix_multiply_some_lanes_skip_is_refused():
    code = WMMA.replace("    wmma::mma_sync(fc, fa, fb, fc);",
                        "    if (threadIdx.x < 16) wmma::mma_sync(fc, fa, fb, fc);")
    with pytest.raises(KernelError, match=r"^lane \d+ of warp 0 waits in __syncwarp"):
        run_on_cpu(code, "products", (1,), (32,), *(cp.zeros(256, t) for t in (cp.float16,
                   cp.float16, cp.float32, cp.float32)), np.int32(0))


def run_on_cpu(code, name, grid, block, *arguments):
    launch(CUPY_ON_CPU, code, name, grid, block, *arguments)


COPY = r"""
extern "C" __global__ void copy(const float* x, float* y, long long n, long long shift) {
    const long long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i + shift];
}
"""


@needs_compiler
def test_a_read_past_an_argument_stops_the_launch():
    """An argument's copy ends where a page the kernel may not touch begins."""
    x, y = cp.arange(10, dtype=cp.float32), cp.zeros(10, cp.float32)
    with pytest.raises(KernelError, match=r"^copy read byte 40 of argument x, outside the 40 "
                                          r"bytes it was given$"):
        run_on_cpu(COPY, "copy", (1,), (32,), x, y, 10, 1)
    assert not y.any()                                  # nothing copied back


@needs_compiler
def test_a_read_before_an_argument_reads_nan():
    """Before an argument's start, up to the page boundary, lie 0xff bytes: NaN in every
    float type, which the numbers then show; a read in the page before them stops the
    launch."""
    x, y = cp.arange(10, dtype=cp.float32), cp.zeros(10, cp.float32)
    run_on_cpu(COPY, "copy", (1,), (32,), x, y, 10, -1)
    assert np.isnan(cp.asnumpy(y)[0])
    np.testing.assert_array_equal(cp.asnumpy(y)[1:], np.arange(9))
    with pytest.raises(KernelError, match=r"^copy read byte -8000 of argument x, outside the "
                                          r"40 bytes it was given$"):
        run_on_cpu(COPY, "copy", (1,), (32,), x, y, 10, -2000)


@needs_compiler
def test_a_write_before_an_argument_is_found_after_the_launch():
    code = COPY.replace("y[i] = x[i + shift]", "y[i + shift] = x[i]")
    x, y = cp.arange(10, dtype=cp.float32), cp.zeros(10, cp.float32)
    with pytest.raises(KernelError, match=r"^copy wrote byte -4 of argument y, outside the 40 "
                                          r"bytes it was given$"):
        run_on_cpu(code, "copy", (1,), (32,), x, y, 10, -1)


@needs_compiler
def test_a_kernel_that_writes_into_a_read_only_view_is_stopped():
    x = cp.broadcast_to(cp.arange(4, dtype=cp.float32), (3, 4))
    code = 'extern "C" __global__ void touch(float* x) { x[threadIdx.x] = 1.0f; }'
    with pytest.raises(KernelError, match=r"^touch wrote into argument x, an array that is "
                                          r"read-only \(a broadcast view\?\)$"):
        run_on_cpu(code, "touch", (1,), (4,), x)


DIVERGENT = r"""
extern "C" __global__ void divergent(float* y, int leave) {
    const int lane = threadIdx.x % 32;
    if (lane == leave) return;
    float v = lane;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    y[threadIdx.x] = v;
}
"""


@needs_compiler
def test_a_lane_that_returns_before_a_shuffle_its_mask_names_is_an_error():
    """Undefined on a GPU (it may hang or read garbage): here an error naming the lanes."""
    y = cp.zeros(64, cp.float32)
    run_on_cpu(DIVERGENT, "divergent", (1,), (64,), y, -1)
    np.testing.assert_array_equal(to_numpy(y), 496.0)              # 0 + 1 + ... + 31
    with pytest.raises(KernelError, match=r"^lane 0 of warp 0 waits in __shfl_xor_sync with "
                                          r"mask 0xffffffff, but lane 5 has returned$"):
        run_on_cpu(DIVERGENT, "divergent", (1,), (64,), y, 5)


@needs_compiler
@pytest.mark.parametrize("code, message", [
    (('extern "C" __global__ void k(float* y) {\n'
     '    if (threadIdx.x < 16) { y[0] = __shfl_xor_sync(0xffffffffu, 1.0f, 1); }\n'
     '    else { y[1] = __all_sync(0xffffffffu, 1); } }'),
     (r"the lanes of warp 0 diverge: lane 0 waits in __shfl_xor_sync with mask 0xffffffff, "
     r"lane 16 in __all_sync with mask 0xffffffff")),
    ('extern "C" __global__ void k(float* y) { if (threadIdx.x > 0) __syncthreads(); }',
     r"31 threads of block \(0, 0, 0\) wait in __syncthreads, but thread 0 has returned"),
    ('extern "C" __global__ void k(float* y) { y[0] = __shfl_sync(0x0000ffffu, 1.0f, 0); }',
     (r"thread 16 \(lane 16 of warp 0\) called __shfl_sync with mask 0x0000ffff, which "
     r"leaves it out")),
    (('extern "C" __global__ void k(float* y) {\n'
     '    if (threadIdx.x < 16) y[0] = __shfl_sync(0x0000ffffu, 1.0f, 20); }'),
     (r"lane 0 of warp 0 reads lane 20 in __shfl_sync, but the mask 0x0000ffff leaves that "
     r"lane out")),
    (('extern "C" __global__ void k(float* y) {\n'
     '    y[0] = (int)(threadIdx.x + 7) / (int)(threadIdx.x / 64); }'),
     r"k: an arithmetic trap \(integer division by zero\?\) in a thread of block \(0, 0, 0\)"),
    ('extern "C" __global__ void k(float* y) { assert(threadIdx.x < 20); }',
     (r"assertion failed in thread \(20, 0, 0\) of block \(0, 0, 0\): threadIdx.x < 20 "
     r"\(line 1\)")),
])
def test_undefined_behaviour_in_a_block_is_an_error(code, message):
    with pytest.raises(KernelError, match=f"^{message}$"):
        run_on_cpu(code, "k", (1,), (32,), cp.zeros(2, cp.float32))


SCALE = r"""
extern "C" __global__ void scale(float* y, int n, float by) {
    if (threadIdx.x < n) y[threadIdx.x] *= by;
}
"""


@needs_compiler
@pytest.mark.parametrize("arguments, error, message", [
    ((4, np.float32(2.0)), None, None),                       # an int64 read as an int: fits
    ((4, 2.0), KernelError, (r"scale: argument by is a floating-point number of 8 bytes, but "
                            r"the kernel takes one of 4 there")),
    ((4.0, np.float32(2)), KernelError, (r"scale: argument n is a floating-point number, but "
                                        r"the kernel takes an integer there")),
    ((2 ** 40, np.float32(2)), KernelError, (r"scale: argument n is 1099511627776, which the "
                                            r"kernel's 4-byte parameter cannot hold")),
    ((4,), KernelError, r"scale takes 3 arguments, given 2"),
    ((4, "2"), TypeError, r"Unsupported type <class 'str'>"),
    ((np.ones(4), np.float32(2)), TypeError, r"Unsupported type <class 'numpy.ndarray'>"),
])
def test_arguments_are_passed_as_cupy_passes_them(arguments, error, message):
    """CuPy passes a Python int as an int64 and a float as a float64 (the kernel reads its
    parameter's size from it); an argument the kernel would read wrongly is an error."""
    y = cp.ones(4, cp.float32)
    if error is None:
        run_on_cpu(SCALE, "scale", (1,), (32,), y, *arguments)
        np.testing.assert_array_equal(to_numpy(y), 2.0)
        return
    with pytest.raises(error, match=message):
        run_on_cpu(SCALE, "scale", (1,), (32,), y, *arguments)


@needs_compiler
@pytest.mark.parametrize("grid, block", [((1,), (1025,)), ((1,), (4, 4, 65)),
                                         ((1, 65536), (32,))])
def test_an_invalid_launch_configuration_is_refused(grid, block):
    with pytest.raises(KernelError, match=r"^scale: invalid launch configuration"):
        run_on_cpu(SCALE, "scale", grid, block, cp.ones(4, cp.float32), 4, np.float32(2))


@needs_compiler
@pytest.mark.parametrize("code, message", [
    ('extern "C" __global__ void k(float* y) { y[0] = undefined_name; }',
     r"does not compile:\n(.|\n)*undefined_name"),
    (('__device__ float f(float x) { float r; asm("mov.f32 %0, %1;" : "=f"(r) : "f"(x)); '
     'return r; }\nextern "C" __global__ void k(float* y) { y[0] = f(1.0f); }'),
     (r"^k: no CPU stand-in for the inline PTX in `__device__ float f\(float x\)`; add one to "
     r"PTX_STAND_INS$")),
])
def test_sources_the_harness_cannot_run_are_refused_by_name(code, message):
    with pytest.raises(CompileError, match=message):
        run_on_cpu(code, "k", (1,), (32,), cp.zeros(2, cp.float32))


@needs_compiler
def test_a_kernel_is_compiled_once_for_its_source(monkeypatch):
    """Builds are kept by the hash of what is compiled (the source, the prelude, the compiler
    and its flags): the same source again, in this process or another, runs the library
    already built, and compiles nothing."""
    kernels.Kernel(SCALE, "scale")                              # built now, or before
    compiles = []
    monkeypatch.setattr(kernels.subprocess, "run", lambda *a, **k: compiles.append(a))
    monkeypatch.setattr(kernels, "_libraries", {})              # as another process
    kernels.Kernel(SCALE, "scale")((1,), (32,), (cp.ones(4, cp.float32), 4, np.float32(2)))
    assert compiles == []
    paths = {kernels.library_path(text, "c++17") for text in ("a", "a", "b")}
    assert len(paths) == 2 and all(path.parent == paths.pop().parent for path in list(paths))


# ---------------------------------------------------------------------------------------------
# The stand-in keeps CuPy's rules

@needs_compiler
def test_the_stand_in_refuses_host_arrays_where_cupy_does():
    x, host = cp.arange(3.0), np.arange(3.0)
    for operation in (lambda: x + host, lambda: host * x, lambda: cp.concatenate([x, host]),
                      lambda: cp.exp(host), lambda: cp.ascontiguousarray(host),
                      lambda: cp.copyto(x, host), lambda: cp.maximum(x, 0, out=host)):
        with pytest.raises(TypeError, match="^Unsupported type <class 'numpy.ndarray'>$"):
            operation()
    assert isinstance(cp.asarray(host), cp.ndarray)          # the way to the device
    x[...] = host                                            # and into a device array
    np.testing.assert_array_equal(cp.asnumpy(x), host)


@needs_compiler
def test_the_stand_in_gives_device_arrays_as_cupy_does():
    x = cp.arange(6.0).reshape(2, 3)
    for result in (x.sum(), x[1, 2], cp.exp(x).max(), x.mean(axis=None)):
        assert type(result) is cp.ndarray and result.shape == ()
    out = cp.empty_like(x)
    assert cp.multiply(x, 2, out=out) is out and cp.maximum(x, 1, out=out) is out
    assert np.isnan(cp.asnumpy(cp.empty((2, 2)))).all()     # fresh memory is not zeros
    assert type(x.get()) is np.ndarray
    free, total = cp.cuda.Device().mem_info
    assert 0 < free <= total


@needs_compiler
def test_loading_a_module_on_the_stand_in_leaves_import_cupy_alone():
    before = sys.modules.get("cupy")
    module = cupy_on_cpu.load_source(source(SPEC, {}, "cupy"))
    assert module.cp is module.rt.cp is cp and sys.modules.get("cupy") is before


def gemm(a, b, transposed_a=False, transposed_b=False, dtype="float32", **change):
    """a @ b for stacks of matrices through the stand-in's gemmStridedBatchedEx as
    batched_matmul calls it (C^T = B^T A^T, the operands row-major or read transposed)."""
    a, b = cp.asarray(a.astype(dtype)), cp.asarray(b.astype(dtype))
    count, m, k = a.shape
    n = b.shape[-1]
    stored_a = cp.ascontiguousarray(a.swapaxes(-1, -2)) if transposed_a else a
    stored_b = cp.ascontiguousarray(b.swapaxes(-1, -2)) if transposed_b else b
    c = cp.zeros((count, m, n), dtype=dtype)
    data_type, compute = {"float16": (2, 68), "float32": (0, 68), "float64": (1, 70)}[dtype]
    scalar = ctypes.c_double if compute == 70 else ctypes.c_float
    one, zero = scalar(change.pop("alpha", 1)), scalar(change.pop("beta", 0))
    arguments = {
        "handle": 1, "transa": int(transposed_b), "transb": int(transposed_a),
        "m": n, "n": m, "k": k, "alpha": ctypes.addressof(one),
        "A": stored_b.data.ptr, "Atype": data_type, "lda": k if transposed_b else n,
        "strideA": k * n,
        "B": stored_a.data.ptr, "Btype": data_type, "ldb": m if transposed_a else k,
        "strideB": m * k, "beta": ctypes.addressof(zero),
        "C": c.data.ptr, "Ctype": data_type, "ldc": n, "strideC": m * n,
        "batchCount": count, "computeType": compute, "algo": -1}
    standin.gemmStridedBatchedEx(**(arguments | change))
    return cp.asnumpy(c)


@needs_compiler
@pytest.mark.parametrize("transposed_a", [False, True])
@pytest.mark.parametrize("transposed_b", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_the_stand_ins_cublas_reads_memory_as_cublas_does(transposed_a, transposed_b, dtype):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 5, 2))
    expected = a.astype(dtype).astype(np.float64) @ b.astype(dtype).astype(np.float64)
    got = gemm(a, b, transposed_a, transposed_b, dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got.astype(np.float64), expected,
                               atol={"float16": 1e-2}.get(dtype, 1e-5))


@needs_compiler
@pytest.mark.parametrize("change, message", [
    ({"lda": 1}, (r"^CUBLAS_STATUS_INVALID_VALUE: m 2, n 4, k 5, lda 1, ldb 5, ldc 2, "
                 r"batchCount 3$")),
    ({"strideC": 9}, r"^C: reaches 8 bytes past the end of its array \(96 bytes\)$"),
    ({"computeType": 70}, r"^CUBLAS_STATUS_NOT_SUPPORTED: types A 0, B 0, C 0, compute 70$"),
    ({"A": 8}, r"^A: pointer 0x8 is in no array's memory$"),
])
def test_the_stand_ins_cublas_refuses_what_cublas_would_not_do(change, message):
    rng = np.random.default_rng(0)
    with pytest.raises(standin.CUBLASError, match=message):
        gemm(rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 5, 2)), **change)


@needs_compiler
def test_the_stand_ins_cublas_adds_beta_c_and_scales_by_alpha():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    np.testing.assert_allclose(gemm(a, b, dtype="float64", alpha=2.0, beta=0.0), 2 * (a @ b),
                               rtol=1e-14)
