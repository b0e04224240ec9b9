"""The generated CuPy runtime's CUDA kernels compiled by nvcc for real GPUs (sm_80, sm_90),
and what ptxas reports of each: registers, spills, stack and static shared memory.

``modules()`` is every CUDA module the runtime can build, each as CuPy would be handed it,
derived from the runtime itself: its text (``runtime_source("cupy")``) is imported with
``import cupy`` bound to the CPU stand-in (support/cupy_on_cpu) whose ``RawModule``,
``RawKernel`` and ``ElementwiseKernel`` only record what they are given, and its kernel
builders are called with every argument the runtime can give them (``call_builders``): each
dtype of ``STORAGE``, each head width of ``ATTEND_WIDTHS``, both values of a flag. What they record
is the code, the options and the name expressions CuPy's NVRTC would get; a module is
compiled as that code, its name expressions instantiated by their addresses as NVRTC does,
with those options. An element-wise kernel is compiled inside the wrapper CuPy writes around
it (its types as typedefs, then its preamble, then a loop over the elements; CuPy's float16
class is cuda_fp16's ``__half`` here), for each dtype.

``compile_module(module, arch)`` runs ``nvcc -cubin -arch=<arch> --resource-usage`` (so that
ptxas runs: ``-ptx`` alone reports no registers or spills) and reads ptxas' report;
``problems`` says what in a kernel's resources is past the limits. NVRTC is what CuPy compiles
with; nvcc's front end and ptxas are a close proxy for it. ``MISSING`` says why this cannot
run here ("" when it can).
"""

import ast
import concurrent.futures
import dataclasses
import functools
import importlib.util
import inspect
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from support.cupy_on_cpu import kernels as cpu_kernels
from support.cupy_on_cpu import modules_replaced, standin

from tspec.codegen.generate import runtime_source

ARCHS = ("sm_80", "sm_90")                  # A100 and H100
SHARED_LIMIT = 48 * 1024                    # static shared memory a block may have
THREADS = 128           # a block of each kernel the runtime launches (ATTEND_THREADS; 4 rows)
BLOCKS = 3              # blocks an SM should hold: an A100's 164 KiB hold 3 of 48 KiB
# registers a thread may use for BLOCKS blocks of THREADS to fit an SM's 65536 registers,
# which go to warps 256 at a time: 168 (3 blocks x 4 warps x 168 x 32 = 64512)
REGISTER_LIMIT = 65536 // (BLOCKS * THREADS // 32) // 256 * 256 // 32
NVCC = shutil.which("nvcc")
CXXFILT = shutil.which("c++filt")           # ptxas names kernels by their mangled names
MISSING = ("no nvcc (CUDA's compiler) on PATH" if NVCC is None else
           "c++filt (binutils), to read ptxas' kernel names, is not on PATH" if CXXFILT is None
           else "")
# CuPy's type names in an element-wise kernel's typedefs, by dtype
ELEMENTWISE_TYPES = {"float16": "float16", "float32": "float", "float64": "double"}


class CompileError(Exception):
    """nvcc refused a module, or its report lacks a kernel: the messages, with the command."""


@dataclasses.dataclass(frozen=True)
class Instantiation:
    """One kernel as CuPy compiles it: its name, the name expression CuPy asks for (an
    element-wise kernel's name), the dtype of its arrays and its other template arguments."""

    kernel: str
    expression: str
    dtype: str
    params: str = ""

    def __str__(self):
        extra = f", {self.params}" if self.params else ""
        return f"{self.expression} ({self.dtype}{extra})"


@dataclasses.dataclass(frozen=True)
class Module:
    """CUDA text as nvcc compiles it, its nvcc options, and the kernels it holds."""

    kind: str                            # "raw" (RawModule, RawKernel) or "elementwise"
    code: str
    options: tuple[str, ...]
    kernels: tuple[Instantiation, ...]

    def __str__(self):
        return " + ".join(str(kernel) for kernel in self.kernels)


@dataclasses.dataclass(frozen=True)
class Resources:
    """What ptxas reports of one kernel for one architecture."""

    registers: int
    spill_stores: int                    # bytes
    spill_loads: int                     # bytes
    stack: int                           # bytes of stack frame (local memory) a thread
    shared: int                          # bytes of static shared memory a block


@dataclasses.dataclass(frozen=True)
class Result:
    """A kernel compiled for an architecture: its resources, and the module's compile time."""

    kernel: Instantiation
    arch: str
    resources: Resources
    seconds: float
    warnings: tuple[str, ...] = ()       # what nvcc warned of in the module, if anything


# ---------------------------------------------------------------------------------------------
# The runtime's modules

def _recording_cupy(records: list) -> types.ModuleType:
    """The stand-in for CuPy, its kernel classes recording what they are given."""
    cupy = types.ModuleType("cupy")
    cupy.__dict__.update(standin.module.__dict__)

    class RawModule:
        def __init__(self, code=None, *, path=None, options=(), name_expressions=None,
                     **_ignored):
            records.append(("raw", code, tuple(options), tuple(name_expressions or ())))

        def get_function(self, name):
            return name

    def RawKernel(code, name, options=(), **_ignored):
        records.append(("raw", code, tuple(options), (name,)))
        return name

    class ElementwiseKernel:
        def __init__(self, in_params, out_params, operation, name="kernel", reduce_dims=True,
                     preamble="", **_ignored):
            records.append(("elementwise", in_params, out_params, operation, name, preamble))

        def __call__(self, *args, **kwargs):
            raise NotImplementedError("a recorded kernel is not run")

    cupy.RawModule, cupy.RawKernel = RawModule, RawKernel
    cupy.ElementwiseKernel = ElementwiseKernel
    return cupy


def load_runtime(text: str, records: list) -> types.ModuleType:
    """The CuPy runtime ``text`` imported on the recording stand-in, as a module of its own
    (nothing else sees it); what its kernel classes are given goes to ``records``."""
    name = "_tspec_cuda_resources_runtime"
    modules = {**standin.MODULES, "cupy": _recording_cupy(records)}
    with modules_replaced(modules, name), \
            tempfile.TemporaryDirectory(prefix="tspec-nvcc-") as folder:
        path = Path(folder) / "_runtime.py"
        path.write_text(text, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


def rows_kernel_calls(text: str) -> list[tuple[str, str, int]]:
    """(source's name, kernel's name, how many flags) of each ``rows_kernel(SOURCE, "name",
    dtype, *flags)`` call in the runtime's text."""
    calls = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "rows_kernel":
            source, name = node.args[:2]
            calls.add((source.id, name.value, len(node.args) - 3))
    return sorted(calls)


def _parameters(function, expected: tuple[str, ...]) -> None:
    found = tuple(inspect.signature(function).parameters)
    if found != expected:
        raise AssertionError(f"{function.__name__}{found}: support/nvcc.py calls it as "
                             f"{function.__name__}{expected}; update call_builders")


def call_builders(rt: types.ModuleType, text: str) -> None:
    """Call each kernel builder of the runtime with every argument the runtime can give it,
    each builder's cache bypassed so that each call builds: rows_kernel for each of its calls
    in the runtime's text, with each dtype of STORAGE and both values of each flag the call
    passes; attend_kernels with each dtype, each width of ATTEND_WIDTHS and tensor cores or
    not (the runtime asks for them for float16; the module is the same for every dtype, so
    it is one a width); glu_kernel and epilogue_kernel with each activation's CUDA formula
    (its ``device_function``)."""
    dtypes, flags = tuple(rt.STORAGE), (False, True)
    _parameters(rt.rows_kernel, ("source", "name", "dtype", "flags"))
    for source, name, count in rows_kernel_calls(text):
        for dtype in dtypes:
            for chosen in itertools.product(flags, repeat=count):
                rt.rows_kernel.__wrapped__(getattr(rt, source), name, dtype, *chosen)
    _parameters(rt.attend_kernels, ("dtype_name", "width", "tensor_cores"))
    for dtype, width, tensor_cores in itertools.product(dtypes, rt.ATTEND_WIDTHS, flags):
        rt.attend_kernels.__wrapped__(dtype, width, tensor_cores)
    formulas = sorted({f.device_function for f in vars(rt).values()
                       if callable(f) and hasattr(f, "device_function")})
    for builder in (rt.glu_kernel, rt.epilogue_kernel):
        _parameters(builder, ("function", "source"))
        for formula in formulas:
            builder.__wrapped__(*formula)



def _split_arguments(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"     # between a kernel's void and its name


def describe(code: str, expression: str, storage: dict[str, str]) -> Instantiation:
    """The kernel a name expression names in ``code``: its dtype (the storage type its T is,
    else that of its first pointer parameter) and its other template arguments."""
    kernel, _, arguments = expression.partition("<")
    kernel = kernel.strip()
    by_type = {ctype: dtype for dtype, ctype in storage.items()}
    plain = cpu_kernels._blank_comments_and_strings(code)
    template = re.search(rf"template\s*<([^>]*)>\s*__global__\s+void\s+{BOUNDS}{kernel}\s*\(",
                         plain)
    names = [part.split()[-1] for part in _split_arguments(template.group(1))] \
        if template else []
    values = _split_arguments(arguments.rstrip().removesuffix(">"))
    if len(names) != len(values):
        raise ValueError(f"{expression}: {len(values)} template arguments for {names}")
    dtype, params = None, []
    for name, value in zip(names, values):
        if value in by_type and dtype is None:
            dtype = by_type[value]
        else:
            params.append(f"{name}={value}")
    if dtype is None:
        first = re.search(rf"__global__\s+void\s+{BOUNDS}{kernel}\s*\(\s*(?:const\s+)?"
                          r"([\w ]+?)\s*\*", plain)
        dtype = by_type.get(first.group(1), "?") if first else "?"
    return Instantiation(kernel, expression, dtype, ", ".join(params))


def raw_module(code: str, options: tuple[str, ...], expressions: tuple[str, ...],
               storage: dict[str, str]) -> Module:
    """A RawModule's text as nvcc compiles it: its name expressions instantiated by taking
    their addresses, as NVRTC does for name expressions."""
    taken = ", ".join(f"(void*)&{expression}" for expression in expressions)
    text = (f"{code}\n// the kernels CuPy names (its name expressions), instantiated\n"
            f"void* tspec_name_expressions[] = {{{taken}}};\n")
    return Module("raw", text, options,
                  tuple(describe(code, expression, storage) for expression in expressions))


def elementwise_module(in_params: str, out_params: str, operation: str, name: str,
                       preamble: str, dtype: str) -> Module:
    """An element-wise kernel for arrays of ``dtype`` inside the wrapper CuPy writes around
    it: the types as typedefs, the preamble, then the operation on each element."""
    inputs = cpu_kernels.parse_parameters(in_params)
    outputs = cpu_kernels.parse_parameters(out_params)
    placeholders = sorted({written for written, _ in inputs + outputs
                           if cpu_kernels.type_name(written) is None})
    typedefs = "".join(f"typedef {ELEMENTWISE_TYPES[dtype]} {placeholder};\n"
                       for placeholder in placeholders)

    def ctype(written):
        known = cpu_kernels.type_name(written)
        return written if known is None else ELEMENTWISE_TYPES[known]

    parameters = ", ".join([f"const {ctype(t)}* _raw_{n}" for t, n in inputs] +
                           [f"{ctype(t)}* _raw_{n}" for t, n in outputs] + ["long long _size"])
    reads = "".join(f"        const {ctype(t)}& {n} = _raw_{n}[i];\n" for t, n in inputs)
    writes = "".join(f"        {ctype(t)}& {n} = _raw_{n}[i];\n" for t, n in outputs)
    text = ("#include <cuda_fp16.h>\n"
            "typedef __half float16;  // CuPy's float16 (cupy/float16.cuh) is a class over it\n"
            f"{typedefs}{preamble}\n"
            f'extern "C" __global__ void {name}({parameters}) {{\n'
            "    #pragma unroll 1\n"
            "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
            "i < _size; i += (long long)blockDim.x * gridDim.x) {\n"
            f"{reads}{writes}        {operation.strip()};\n"
            "    }\n}\n")
    plain = cpu_kernels._blank_comments_and_strings(preamble)
    defined = re.findall(r"__device__[^;{]*?\b(\w+)\s*\(", plain)
    applied = [f for f in dict.fromkeys(defined) if re.search(rf"\b{f}\s*\(", operation)]
    return Module("elementwise", text, (),
                  (Instantiation(name, name, dtype, ", ".join(f"f={f}" for f in applied)),))


@functools.cache
def modules(text: str | None = None) -> tuple[Module, ...]:
    """Every CUDA module the CuPy runtime (its text; the one this checkout renders where
    None) can build, each once."""
    text = runtime_source("cupy") if text is None else text
    records: list = []
    rt = load_runtime(text, records)
    call_builders(rt, text)
    storage = dict(rt.STORAGE)
    found: dict = {}
    for record in records:
        if record[0] == "raw":
            _, code, options, expressions = record
            found.setdefault(record, raw_module(code, options, expressions, storage))
        else:
            for dtype in storage:
                found.setdefault(record + (dtype,), elementwise_module(*record[1:], dtype))
    return tuple(sorted(found.values(), key=lambda module: module.kind != "raw"))


def instantiations(text: str | None = None) -> tuple[Instantiation, ...]:
    """Every kernel instantiation of ``modules(text)``, each once (attend_combine<T> is in
    each of T's attention modules)."""
    return tuple(dict.fromkeys(k for module in modules(text) for k in module.kernels))


# ---------------------------------------------------------------------------------------------
# nvcc and ptxas' report

OPTION = re.compile(r"--?std=c\+\+\d\d|-D\S+|-I\S+|--include-path=\S+")


def command(module: Module, arch: str, source: Path, output: Path) -> list[str]:
    """The nvcc command that compiles a module for ``arch`` as NVRTC would, ptxas reporting."""
    for option in module.options:
        if not OPTION.fullmatch(option):
            raise ValueError(f"{module}: NVRTC option {option!r} has no nvcc spelling in "
                             "support/nvcc.py")
    return [NVCC or "nvcc", "-cubin", f"-arch={arch}", "--resource-usage", *module.options,
            "-o", str(output), str(source)]


ENTRY = re.compile(r"Compiling entry function '(.+)' for '(\w+)'")
PROPERTIES = re.compile(r"Function properties for (.+?)\s*$")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")
WARNING = re.compile(r"\bwarning\b", re.IGNORECASE)


def kernel_key(name: str) -> str:
    """A kernel's name as ptxas reports it, demangled (``void f<float, 32>(float const*,
    ...)``), or a name expression, as one key: the name and template arguments, no spaces."""
    name = re.sub(r"^void\s+", "", name.strip())
    depth = 0
    for position, character in enumerate(name):
        depth += {"<": 1, ">": -1}.get(character, 0)
        if character == "(" and depth == 0:
            name = name[:position]
            break
    return re.sub(r"\s+", "", name)


def parse_report(report: str, arch: str) -> dict[str, Resources]:
    """The resources of each entry function (by ``kernel_key``) in ptxas' report for
    ``arch`` (its --resource-usage lines, names demangled)."""
    found: dict[str, dict] = {}
    entry = properties = None
    for line in report.splitlines():
        if match := ENTRY.search(line):
            entry = None
            if match.group(2) == arch:
                entry = kernel_key(match.group(1))
                found[entry] = {}
        elif match := PROPERTIES.search(line):
            properties = kernel_key(match.group(1))
        elif (match := FRAME.search(line)) and properties in found:
            found[properties].update(stack=int(match.group(1)),
                                     spill_stores=int(match.group(2)),
                                     spill_loads=int(match.group(3)))
        elif (match := USED.search(line)) and entry is not None:
            shared = SMEM.search(line)
            found[entry].update(registers=int(match.group(1)),
                                shared=int(shared.group(1)) if shared else 0)
    incomplete = [name for name, fields in found.items() if len(fields) != 5]
    if incomplete:
        raise CompileError(f"ptxas' report for {arch} lacks the registers or the stack frame "
                           f"of {', '.join(incomplete)}:\n{report}")
    return {name: Resources(**fields) for name, fields in found.items()}


def demangled(text: str) -> str:
    return subprocess.run([CXXFILT or "c++filt"], input=text, capture_output=True, text=True,
                          check=True).stdout


def compile_module(module: Module, arch: str) -> list[Result]:
    """Each kernel of ``module`` compiled by nvcc for ``arch``, with ptxas' figures."""
    with tempfile.TemporaryDirectory(prefix="tspec-nvcc-") as folder:
        source = Path(folder) / "kernels.cu"
        source.write_text(module.code, encoding="utf-8")
        started = time.perf_counter()
        done = subprocess.run(command(module, arch, source, Path(folder) / "kernels.cubin"),
                              capture_output=True, text=True, check=False, timeout=600)
        seconds = time.perf_counter() - started
    report = demangled(done.stdout + done.stderr)
    if done.returncode != 0:
        try:                                 # what ptxas measured before it refused, if any
            found = parse_report(report, arch)
        except CompileError:
            found = {}
        why = [problem for k in module.kernels if kernel_key(k.expression) in found
               for problem in problems(Result(k, arch, found[kernel_key(k.expression)], 0))]
        raise CompileError(f"{module} does not compile for {arch} (nvcc exit status "
                           f"{done.returncode}):\n" + "".join(f"{line}\n" for line in why) +
                           report)
    found = parse_report(report, arch)
    missing = [str(k) for k in module.kernels if kernel_key(k.expression) not in found]
    if missing:
        raise CompileError(f"ptxas' report for {arch} names none of {', '.join(missing)} "
                           f"(it names {', '.join(found) or 'nothing'}):\n{report}")
    warned = tuple(line.strip() for line in report.splitlines() if WARNING.search(line))
    return [Result(k, arch, found[kernel_key(k.expression)], seconds, warned)
            for k in module.kernels]


def compile_each(chosen=None, archs=ARCHS, workers: int = 2) -> list[list[Result]]:
    """Every module (or those ``chosen``) compiled for every arch, ``workers`` at a time: the
    results of each compilation, module by module, arch by arch."""
    jobs = [(module, arch) for module in (modules() if chosen is None else chosen)
            for arch in archs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda job: compile_module(*job), jobs))


def compile_all(chosen=None, archs=ARCHS, workers: int = 2) -> list[Result]:
    """As ``compile_each``: a result for each instantiation and arch, each once (the first
    module's that holds it), in the modules' order."""
    unique: dict = {}
    for results in compile_each(chosen, archs, workers):
        for result in results:
            unique.setdefault((result.kernel, result.arch), result)
    return list(unique.values())


def problems(result: Result, register_limit: int = REGISTER_LIMIT) -> list[str]:
    """What in a kernel's resources is past the limits, each a sentence naming the kernel,
    its dtype and the architecture: a spill, static shared memory past 48 KiB, registers past
    ``register_limit``, and a warning of nvcc's (none today)."""
    where = f"{result.kernel} for {result.arch}"
    used = result.resources
    found = []
    if used.spill_stores or used.spill_loads:
        found.append(f"{where}: ptxas spills registers to local memory ({used.spill_stores} "
                     f"bytes of spill stores, {used.spill_loads} bytes of spill loads)")
    if used.shared > SHARED_LIMIT:
        found.append(f"{where}: {used.shared} bytes of static shared memory, past the "
                     f"{SHARED_LIMIT} (48 KiB) a block may have")
    if used.registers > register_limit:
        found.append(f"{where}: {used.registers} registers a thread, past {register_limit} "
                     f"(fewer than {BLOCKS} blocks of {THREADS} threads fit an SM)")
    found += [f"{where}: nvcc warns: {warning}" for warning in result.warnings]
    return found
