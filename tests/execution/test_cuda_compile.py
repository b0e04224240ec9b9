"""The CuPy runtime's CUDA kernels compiled by nvcc for real GPUs (sm_80, sm_90), where nvcc
is (skipped, saying why, where it is not): every kernel and every instantiation the runtime can
ask CuPy for (support/nvcc.py derives them from the runtime itself), with ptxas' report read
and held to the limits: no spill, at most 48 KiB of static shared memory a block, at most
REGISTER_LIMIT registers a thread, no warning.

A sample (one module of each kind, at the extremes: float16's inline PTX, the residual
variant, the widest tiles, the tensor cores) compiles in the default run; all of them are the
slow test. Without nvcc the enumeration and the reading of ptxas' report are still checked,
on a report written out here, and so is that a spill, too much shared memory or too many
registers is found and named.
"""

import ast
import itertools
import re

import pytest
from support import nvcc

from tspec.codegen.generate import runtime_source

needs_nvcc = pytest.mark.skipif(bool(nvcc.MISSING), reason=f"needs nvcc: {nvcc.MISSING}")
STORAGE = {"float16": "unsigned short", "float32": "float"}


@pytest.fixture(scope="module")
def runtime():
    """The CuPy runtime this checkout renders, imported on the recording stand-in."""
    return nvcc.load_runtime(runtime_source("cupy"), [])


# ---------------------------------------------------------------------------------------------
# Every kernel, every instantiation the runtime can ask for

def test_every_kernel_the_runtime_defines_is_compiled():
    text = runtime_source("cupy")
    defined = set(re.findall(r"__global__\s+void\s+(\w+)", text))
    defined |= set(re.findall(r'ElementwiseKernel\(.*?\n\s*"(\w+)", preamble=', text, re.DOTALL))
    assert {"softmax_rows", "attend_tiles_wmma", "gelu", "bias_activation"} <= defined
    assert {k.kernel for k in nvcc.instantiations()} == defined


def test_each_cuda_template_is_instantiated_for_every_argument_the_runtime_can_give(runtime):
    """Read apart from the builders' calls: each __global__ template of the runtime is
    instantiated for each storage type (typename T), both values of a flag (bool) and each
    head width (int D), and for nothing else."""
    plain = re.sub(r"//[^\n]*", "", runtime_source("cupy"))
    domains = {"typename": list(runtime.STORAGE.values()), "bool": ["false", "true"],
               "int": [str(width) for width in runtime.ATTEND_WIDTHS]}
    expected = set()
    for parameters, name in re.findall(r"template\s*<([^>]*)>\s*__global__\s+void\s+(\w+)",
                                       plain):
        kinds = [part.split()[0] for part in parameters.split(",")]
        for arguments in itertools.product(*(domains[kind] for kind in kinds)):
            expected.add(f"{name}<{', '.join(arguments)}>")
    raw = {k.expression for k in nvcc.instantiations() if "<" in k.expression}
    assert raw == expected
    assert len(raw) == 46          # the count: 3 + 6 + 6 row kernels, 24 + 3 + 4 attention


def test_a_head_width_the_runtime_gains_is_compiled_too():
    """The instantiations come from the runtime, not a list of them: a width added to
    ATTEND_WIDTHS adds its three tiles, three splits and tensor-core tiles."""
    text = runtime_source("cupy")
    changed = text.replace("ATTEND_WIDTHS = (32, 64, 128, 256)",
                           "ATTEND_WIDTHS = (32, 64, 96, 128, 256)")
    assert changed != text
    before = {k.expression for k in nvcc.instantiations()}
    after = {k.expression for k in nvcc.instantiations(changed)}
    assert after - before == {f"{name}<{storage}, 96>" for name in ("attend_tiles", "attend_split")
                              for storage in ("unsigned short", "float", "double")} | \
        {"attend_tiles_wmma<96>"}
    assert before <= after


def test_each_element_wise_kernel_is_compiled_for_each_dtype_and_formula(runtime):
    formulas = sorted(f"f={f.device_function[0]}" for f in vars(runtime).values()
                      if callable(f) and hasattr(f, "device_function"))
    assert formulas == ["f=gelu_of", "f=gelu_tanh_of", "f=relu_of", "f=silu_of"]
    found = {(k.kernel, k.dtype, k.params) for k in nvcc.instantiations()
             if "<" not in k.expression}
    dtypes = list(runtime.STORAGE)
    expected = {(f[2:-3], dtype, f) for f in formulas for dtype in dtypes}
    expected |= {(name, dtype, f) for name in ("glu", "bias_activation") for f in formulas
                 for dtype in dtypes}
    assert found == expected


def test_a_module_is_the_code_and_options_cupy_is_given(runtime):
    """The attention module of float32 at d = 64: the prelude and source the runtime hands
    RawModule, its options, and its three name expressions instantiated."""
    module = next(m for m in nvcc.modules() if m.kernels[0].expression == "attend_tiles<float, 64>")
    assert module.code.startswith(runtime.ROWS_PRELUDE + runtime.ATTEND_SOURCE)
    assert module.options == ("--std=c++14",)
    assert module.code.endswith(
        "void* tspec_name_expressions[] = {(void*)&attend_tiles<float, 64>, "
        "(void*)&attend_split<float, 64>, (void*)&attend_combine<float>};\n")
    assert [str(k) for k in module.kernels] == [
        "attend_tiles<float, 64> (float32, D=64)", "attend_split<float, 64> (float32, D=64)",
        "attend_combine<float> (float32)"]
    wmma = next(m for m in nvcc.modules() if m.kernels[0].expression == "attend_tiles_wmma<64>")
    assert wmma.code.startswith("#include <mma.h>\n")
    assert str(wmma.kernels[0]) == "attend_tiles_wmma<64> (float16, D=64)"


def test_the_kernels_are_launched_in_blocks_the_register_limit_assumes(runtime):
    """REGISTER_LIMIT counts blocks of THREADS threads: every launch in the runtime uses them."""
    text = runtime_source("cupy")

    def value(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return getattr(runtime, node.id)
        assert isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult), ast.dump(node)
        return value(node.left) * value(node.right)

    blocks = [value(node.args[1].elts[0]) for node in ast.walk(ast.parse(text))
              if isinstance(node, ast.Call) and len(node.args) == 3
              and isinstance(node.args[1], ast.Tuple) and isinstance(node.args[0], ast.Tuple)]
    assert len(blocks) == 4 and set(blocks) == {nvcc.THREADS}
    assert re.findall(r"constexpr int ATTEND_THREADS = (\d+);", text) == [str(nvcc.THREADS)]
    assert nvcc.REGISTER_LIMIT == 168


# ---------------------------------------------------------------------------------------------
# ptxas' report, and the limits

REPORT = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'void attend_combine<float>(Accumulate<float>::type \
const*, float*, long long)' for 'sm_80'
ptxas info    : Function properties for void attend_combine<float>(Accumulate<float>::type \
const*, float*, long long)
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 400 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 42.023 ms
ptxas info    : Function properties for helper(float)
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Compiling entry function 'void attend_tiles<float, 256>(float const*, float*, \
long long)' for 'sm_80'
ptxas info    : Function properties for void attend_tiles<float, 256>(float const*, float*, \
long long)
    128 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 170 registers, used 1 barriers, 128 bytes cumulative stack size, 49168 \
bytes smem, 624 bytes cmem[0]
ptxas info    : Compile time = 321.433 ms
"""


def test_ptxas_report_is_read_kernel_by_kernel():
    assert nvcc.parse_report(REPORT, "sm_80") == {
        "attend_combine<float>": nvcc.Resources(32, 0, 0, 0, 0),
        "attend_tiles<float,256>": nvcc.Resources(170, 8, 12, 128, 49168)}
    assert nvcc.parse_report(REPORT, "sm_90") == {}          # entries for another arch
    assert nvcc.kernel_key("attend_tiles<float, 256>") == "attend_tiles<float,256>"
    assert nvcc.kernel_key("void softmax_rows<unsigned short>(unsigned short const*)") == \
        nvcc.kernel_key("softmax_rows<unsigned short>")


def test_a_report_without_a_kernels_registers_is_refused():
    cut = REPORT.replace("ptxas info    : Used 32 registers", "ptxas info    : Used")
    with pytest.raises(nvcc.CompileError, match=r"ptxas' report for sm_80 lacks the registers "
                                                r"or the stack frame of attend_combine<float>:"):
        nvcc.parse_report(cut, "sm_80")


def test_a_spill_too_much_shared_memory_and_too_many_registers_are_named():
    tiles = nvcc.Instantiation("attend_tiles", "attend_tiles<float, 256>", "float32", "D=256")
    used = nvcc.parse_report(REPORT, "sm_80")["attend_tiles<float,256>"]
    where = "attend_tiles<float, 256> (float32, D=256) for sm_80: "
    assert nvcc.problems(nvcc.Result(tiles, "sm_80", used, 0.0)) == [
        where + "ptxas spills registers to local memory (8 bytes of spill stores, 12 bytes of "
                "spill loads)",
        where + "49168 bytes of static shared memory, past the 49152 (48 KiB) a block may have",
        where + "170 registers a thread, past 168 (fewer than 3 blocks of 128 threads fit an SM)"]
    combine = nvcc.Instantiation("attend_combine", "attend_combine<float>", "float32")
    clean = nvcc.parse_report(REPORT, "sm_80")["attend_combine<float>"]
    assert nvcc.problems(nvcc.Result(combine, "sm_90", clean, 0.0)) == []
    at_limits = nvcc.Resources(nvcc.REGISTER_LIMIT, 0, 0, 0, nvcc.SHARED_LIMIT)
    assert nvcc.problems(nvcc.Result(combine, "sm_90", at_limits, 0.0)) == []
    warned = nvcc.Result(combine, "sm_90", clean, 0.0, ("kernels.cu(3): warning #177-D: x",))
    assert nvcc.problems(warned) == [
        "attend_combine<float> (float32) for sm_90: nvcc warns: kernels.cu(3): warning #177-D: x"]


def test_the_nvcc_command_mirrors_the_options_nvrtc_gets(tmp_path):
    module = next(m for m in nvcc.modules() if m.kernels[0].kernel == "softmax_rows")
    source, output = tmp_path / "k.cu", tmp_path / "k.cubin"
    assert nvcc.command(module, "sm_90", source, output)[1:] == [
        "-cubin", "-arch=sm_90", "--resource-usage", "--std=c++14", "-o", str(output),
        str(source)]
    odd = nvcc.Module("raw", "", ("--device-as-default-execution-space",), module.kernels)
    with pytest.raises(ValueError, match=r"^softmax_rows<unsigned short> \(float16\): NVRTC "
                                         r"option '--device-as-default-execution-space' has no "
                                         r"nvcc spelling in support/nvcc.py$"):
        nvcc.command(odd, "sm_90", source, output)


# ---------------------------------------------------------------------------------------------
# nvcc: a spill and too much shared memory caught, a sample of the kernels, then all of them

SPILLS = r"""
__global__ void __launch_bounds__(1024, 2) spills(const float* x, float* y) {
    float v[40];   // forty live values, at most 32 registers a thread (2 blocks of 1024)
    #pragma unroll
    for (int i = 0; i < 40; ++i) v[i] = x[threadIdx.x + 1024 * i];
    #pragma unroll
    for (int k = 0; k < 40; ++k) {
        float s = 0;
        #pragma unroll
        for (int i = 0; i < 40; ++i) s += v[i] * v[(i + k) % 40];
        y[threadIdx.x + 1024 * k] = s;
    }
}
"""
TOO_MUCH_SHARED = r"""
__global__ void too_much_shared(float* y) {
    __shared__ float s[12289];   // 49156 bytes
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = s[(threadIdx.x * 7) % 12289];
}
"""


@needs_nvcc
def test_a_kernel_that_spills_is_caught():
    module = nvcc.raw_module(SPILLS, (), ("spills",), STORAGE)
    (result,) = nvcc.compile_module(module, "sm_80")
    assert result.resources.registers <= 32 and result.resources.spill_stores > 0
    (problem,) = nvcc.problems(result)
    assert re.fullmatch(r"spills \(float32\) for sm_80: ptxas spills registers to local memory "
                        r"\(\d+ bytes of spill stores, \d+ bytes of spill loads\)", problem)


@needs_nvcc
def test_a_kernel_past_48_kib_of_static_shared_memory_is_refused():
    module = nvcc.raw_module(TOO_MUCH_SHARED, (), ("too_much_shared",), STORAGE)
    with pytest.raises(nvcc.CompileError) as refused:
        nvcc.compile_module(module, "sm_90")
    assert str(refused.value).startswith(
        "too_much_shared (float32) does not compile for sm_90 (nvcc exit status 255):\n"
        "too_much_shared (float32) for sm_90: 49156 bytes of static shared memory, past the "
        "49152 (48 KiB) a block may have\n")
    assert "uses too much shared data" in str(refused.value)      # ptxas' own refusal


# one module of each kind, compiled in the default run: float16's inline PTX conversions, the
# residual variant, float64's widest tiles (8 rows), the most registers (float16 at d = 256),
# the most shared memory (the tensor cores at d = 256), an element-wise kernel on __half
SAMPLE = ["softmax_rows<unsigned short>", "layer_norm_rows<float, true>",
          "attend_tiles<double, 256>", "attend_tiles<unsigned short, 256>",
          "attend_tiles_wmma<256>", "glu"]


def sampled(expression):
    modules = [m for m in nvcc.modules() if m.kernels[0].expression == expression]
    return modules[:1] if expression != "glu" else \
        [m for m in modules if m.kernels[0].dtype == "float16" and "silu" in m.kernels[0].params]


@needs_nvcc
@pytest.mark.parametrize("expression", SAMPLE)
def test_sampled_kernels_compile_for_sm_80_and_sm_90_within_the_limits(expression):
    (module,) = sampled(expression)
    results = nvcc.compile_all([module])
    assert {(str(r.kernel), r.arch) for r in results} == \
        {(str(k), arch) for k in module.kernels for arch in nvcc.ARCHS}
    problems = [problem for result in results for problem in nvcc.problems(result)]
    assert problems == [], "\n".join(problems)


@needs_nvcc
@pytest.mark.slow
def test_every_kernel_compiles_for_sm_80_and_sm_90_within_the_limits():
    """All of them, two at a time (about a minute on two cores)."""
    results = nvcc.compile_all(workers=2)
    assert {(r.kernel, r.arch) for r in results} == \
        {(k, arch) for k in nvcc.instantiations() for arch in nvcc.ARCHS}
    problems = [problem for result in results for problem in nvcc.problems(result)]
    assert problems == [], "\n".join(problems)
