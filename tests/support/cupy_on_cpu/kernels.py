"""CUDA kernel sources compiled by the system C++ compiler and launched on NumPy memory.

A kernel's text is compiled unchanged behind cuda_on_cpu.h, which supplies CUDA's built-ins
(thread and block indices, __syncthreads, warp shuffles and votes, shared memory, half
precision) with every CUDA thread as a fiber. The one thing replaced is inline PTX, which only
a GPU runs: each function whose body holds an ``asm`` statement is swapped, by its exact
signature, for a CPU body from PTX_STAND_INS, and a source with any other is refused by name.
CUDA's headers are include/'s: cuda_fp16.h (the prelude's __half) and mma.h (the warp matrix
multiply API, nvcuda::wmma, emulated on the fibers).

A launch marshals its arguments as CuPy does (an array as its data pointer, a Python int as
an int64, a float as a float64, a NumPy scalar as its bytes; the kernel reads each with its
own parameter's size) and hands the kernel a copy of each array's memory in pages of its own,
between pages it may not touch: a read or write outside an argument stops the launch with a
KernelError that names the argument and how far outside it was, and so does a warp-
synchronous call whose lanes diverge, an integer division by zero or a failed assert.

Builds are cached by the hash of what is compiled (the source with the prelude written into
it, the compiler and its flags), so each kernel is compiled once per machine, in the user's
private folder for generated code.
"""

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np

from tspec.execution.loading import _private_folder
from tspec.files import write_atomic

PRELUDE = Path(__file__).with_name("cuda_on_cpu.h")
INCLUDE = Path(__file__).with_name("include")     # CUDA's headers, as the prelude has them
FLAGS = ("-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-U_FORTIFY_SOURCE", "-w",
         f"-I{INCLUDE}")
# inline PTX, by the normalised signature of the function that holds it: its CPU body
PTX_STAND_INS = {
    "__device__ __forceinline__ float load(const unsigned short* p)":
        "{ return static_cast<float>(__ushort_as_half(*p)); }",
    "__device__ __forceinline__ void store(unsigned short* p, float value)":
        "{ *p = __half_as_ushort(static_cast<__half>(value)); }",
}
# CuPy's element-wise type names, as C++ types
C_TYPES = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
           "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
           "uint32": "unsigned int", "uint64": "unsigned long long", "float16": "_Float16",
           "float32": "float", "float64": "double"}
C_NAMES = {"float": "float32", "double": "float64", "int": "int32", "char": "int8",
           "short": "int16", "long": "int64"}
ERROR_SIZE = 2048
_launching = threading.Lock()          # the prelude's state is one per library, not per thread


class CompileError(Exception):
    """A source the compiler refused (CuPy's CompileException), with its messages."""


class KernelError(RuntimeError):
    """A launch that touched memory outside its arguments, diverged, trapped or asserted."""


def compiler() -> str | None:
    """The C++ compiler kernels are built with ($CXX, else g++), or None."""
    return shutil.which(os.environ.get("CXX", "g++"))


@functools.cache
def _prelude() -> str:
    """The prelude's text, read once: what is hashed is what is compiled."""
    return f'#line 1 "{PRELUDE.name}"\n' + PRELUDE.read_text(encoding="utf-8")


@functools.cache
def _identity() -> str:
    """What a build depends on besides its source: the compiler's version and flags."""
    version = subprocess.run([compiler(), "--version"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[0]
    return "\n".join((version, " ".join(FLAGS)))


def _folder() -> Path:
    folder = _private_folder() / "cuda-on-cpu"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


_libraries: dict[str, ctypes.PyDLL] = {}


def library_path(unit: str, standard: str) -> Path:
    """Where the library of a translation unit is kept: named by the hash of what it is
    built from."""
    text = f"{_identity()}\n{standard}\n{_prelude()}\n{unit}"
    return _folder() / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.so"


def build(unit: str, standard: str) -> ctypes.PyDLL:
    """The shared library of a translation unit that includes the prelude, compiled once."""
    library = library_path(unit, standard)
    key, folder = library.stem, library.parent
    if key in _libraries:
        return _libraries[key]
    if not library.exists():
        source = folder / f"{key}.cpp"
        write_atomic(source, f"{_prelude()}\n{unit}")
        partial = folder / f"{key}.{os.getpid()}.so"
        done = subprocess.run([compiler(), f"-std={standard}", *FLAGS, "-o", str(partial),
                               str(source)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise CompileError(f"{source} does not compile:\n{done.stderr}")
        os.replace(partial, library)
    _libraries[key] = ctypes.PyDLL(str(library))
    return _libraries[key]


def standard_of(options) -> str:
    """The C++ standard nvrtc options name (--std=c++14), else C++17 as nvrtc's default."""
    for option in options:
        found = re.fullmatch(r"--?std=(c\+\+\d\d)", option)
        if found:
            return found.group(1)
    return "c++17"


# ---------------------------------------------------------------------------------------------
# The source: inline PTX replaced, nothing else changed

def _blank_comments_and_strings(code: str) -> str:
    """The code with comments and literals' contents as spaces (same length, same lines)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                         re.DOTALL)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)


def _top_level_bodies(plain: str):
    """(header start, body start, body end) of every brace block at the top level."""
    depth, start, opened = 0, 0, 0
    for position, character in enumerate(plain):
        if character == "{":
            if depth == 0:
                opened = position
            depth += 1
        elif character == "}":
            depth -= 1
            if depth == 0:
                yield start, opened, position + 1
                start = position + 1
        elif depth == 0 and character == ";":
            start = position + 1
        elif depth == 0 and character == "\n" and plain[start:position].lstrip().startswith("#"):
            start = position + 1                             # a preprocessor line ends here


def cpu_source(code: str, name: str) -> str:
    """``code`` with each function that holds inline PTX given its CPU body."""
    plain = _blank_comments_and_strings(code)
    pieces, last = [], 0
    for start, opened, end in _top_level_bodies(plain):
        if not re.search(r"\basm\b", plain[opened:end]):
            continue
        signature = " ".join(plain[start:opened].split())
        if signature not in PTX_STAND_INS:
            raise CompileError(f"{name}: no CPU stand-in for the inline PTX in "
                               f"`{signature}`; add one to PTX_STAND_INS")
        pieces += [code[last:opened], PTX_STAND_INS[signature]]
        last = end
    return "".join(pieces) + code[last:]


def parameter_names(code: str, expression: str) -> list[str]:
    """The names of a kernel's parameters, from its definition (for messages), or []."""
    base = re.escape(expression.split("<")[0].split("::")[-1].strip())
    plain = _blank_comments_and_strings(code)
    found = re.search(rf"__global__\s+void\s+{base}\s*\(([^)]*)\)", plain)
    if not found:
        return []
    return [re.findall(r"\w+", part)[-1] for part in found.group(1).split(",") if part.strip()]


# ---------------------------------------------------------------------------------------------
# Launching a kernel

class _Region(ctypes.Structure):
    _fields_ = [("host", ctypes.c_void_p), ("size", ctypes.c_longlong),
                ("writable", ctypes.c_int)]


class _Argument(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("floating", ctypes.c_int), ("value", ctypes.c_void_p),
                ("size", ctypes.c_longlong), ("region", ctypes.c_int),
                ("offset", ctypes.c_longlong)]


# the NumPy scalar types CuPy passes as they are ('?bhilqBHILQefdFD')
SCALAR_TYPES = {np.dtype(code).type for code in "?bhilqBHILQefdFD"}


def _extent(array: np.ndarray) -> tuple[int, int]:
    """The lowest and one past the highest byte address of an array's elements."""
    start = array.__array_interface__["data"][0]
    if array.size == 0:
        return start, start
    low = high = start
    for size, stride in zip(array.shape, array.strides):
        reach = (size - 1) * stride
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    return low, high + array.itemsize


def _marshal(arguments, is_array):
    """The ctypes structures for a launch, and the objects they point into (kept alive)."""
    keep, spans = [], []
    for index, value in enumerate(arguments):
        if is_array(value):
            spans.append((index, value) + _extent(value))
        elif isinstance(value, np.ndarray):
            raise TypeError(f"Unsupported type {type(value)}")
    regions: list[list] = []                                 # [low, high, writable]
    where = {}
    for index, array, low, high in sorted(spans, key=lambda span: span[2]):
        if regions and low < regions[-1][1]:                 # overlaps the last region
            regions[-1][1] = max(regions[-1][1], high)
            regions[-1][2] = regions[-1][2] or array.flags.writeable
        else:
            regions.append([low, high, array.flags.writeable])
        where[index] = len(regions) - 1
    packed = (_Argument * max(1, len(arguments)))()
    for index, value in enumerate(arguments):
        if index in where:
            region = where[index]
            start = value.__array_interface__["data"][0]
            packed[index] = _Argument(1, 0, None, 0, region, start - regions[region][0])
            continue
        if type(value) not in SCALAR_TYPES:
            if isinstance(value, int):
                value = np.int64(value)
            elif isinstance(value, float):
                value = np.float64(value)
            else:
                raise TypeError(f"Unsupported type {type(value)}")
        scalar = np.array(value)
        keep.append(scalar)
        packed[index] = _Argument(0, int(scalar.dtype.kind in "fc"), scalar.ctypes.data,
                                  scalar.itemsize, 0, 0)
    spans_out = (_Region * max(1, len(regions)))(
        *(_Region(low, high - low, int(writable)) for low, high, writable in regions))
    return packed, spans_out, len(regions), keep


class Kernel:
    """One compiled kernel (a name expression of a module), launched as CuPy launches one."""

    def __init__(self, code: str, expression: str, options=(), is_array=None):
        if not re.fullmatch(r"[\w:<>, *]+", expression):
            raise ValueError(f"not a kernel name expression: {expression!r}")
        self.name = expression
        self.is_array = is_array or (lambda value: isinstance(value, np.ndarray))
        names = parameter_names(code, expression)
        unit = (f'#line 1 "{expression}.cu"\n{cpu_source(code, expression)}\n'
                f'#line 1 "{expression} launcher"\n'
                "CUDA_ON_CPU_EXPORT int cuda_on_cpu_launch(const long long* config, int count, "
                "const cuda_on_cpu::Argument* arguments, const char* const* names, "
                "int region_count, const cuda_on_cpu::Region* regions, char* error, "
                "int error_size) {\n"
                f"    return cuda_on_cpu::launch(&{expression}, \"{expression}\", config, count, "
                "arguments, names, region_count, regions, error, error_size);\n}\n")
        self._launch = build(unit, standard_of(options)).cuda_on_cpu_launch
        self._launch.restype = ctypes.c_int
        self._names = names

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        grid = tuple(max(1, int(g)) for g in (tuple(grid) + (1, 1))[:3])
        block = tuple(max(1, int(b)) for b in (tuple(block) + (1, 1))[:3])
        args = tuple(args)
        config = (ctypes.c_longlong * 7)(*grid, *block, int(shared_mem))
        packed, regions, region_count, _keep = _marshal(args, self.is_array)
        names = [n.encode() for n in self._names] if len(self._names) == len(args) else \
            [f"{i}".encode() for i in range(len(args))]
        c_names = (ctypes.c_char_p * max(1, len(args)))(*names)
        error = ctypes.create_string_buffer(ERROR_SIZE)
        with _launching:
            outcome = self._launch(config, len(args), packed, c_names, region_count, regions,
                                   error, ERROR_SIZE)
        if outcome:
            raise KernelError(error.value.decode())


# ---------------------------------------------------------------------------------------------
# Element-wise kernels

def parse_parameters(text: str) -> list[tuple[str, str]]:
    """CuPy's "T x, float32 y" as [(type, name), ...]; "raw" parameters are not emulated."""
    parameters = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        words = part.split()
        if len(words) != 2 or words[0] == "raw":
            raise NotImplementedError(f"element-wise parameter {part!r} is not emulated")
        parameters.append((words[0], words[1]))
    return parameters


def type_name(written: str) -> str | None:
    """The dtype a written type names (float32, float, ...), or None for a placeholder (T)."""
    written = C_NAMES.get(written, written)
    return written if written in C_TYPES else None


def elementwise_loop(inputs, outputs, operation: str, preamble: str, name: str, types: dict):
    """The compiled loop of an element-wise kernel, its placeholders bound to ``types``
    (placeholder -> dtype name): arrays[0 .. len(inputs)) read, the rest written, element i
    of each as the operation's parameter of that name."""
    def c_type(written):
        return C_TYPES[types.get(written) or type_name(written)]

    typedefs = "".join(f"    typedef {C_TYPES[dtype]} {placeholder};\n"
                       for placeholder, dtype in types.items())
    reads = "".join(f"            const {c_type(t)} {n} = "
                    f"static_cast<const {c_type(t)}*>(arrays[{i}])[i];\n"
                    for i, (t, n) in enumerate(inputs))
    writes = "".join(f"            {c_type(t)}& {n} = "
                     f"static_cast<{c_type(t)}*>(arrays[{len(inputs) + i}])[i];\n"
                     for i, (t, n) in enumerate(outputs))
    unit = (f"typedef _Float16 float16;\n#line 1 \"{name} preamble\"\n"
            f"{cpu_source(preamble, name)}\n#line 1 \"{name} loop\"\n"
            "CUDA_ON_CPU_EXPORT int cuda_on_cpu_elementwise(long long n, void* const* arrays, "
            "char* error, int error_size) {\n"
            f"{typedefs}"
            "    return cuda_on_cpu::guarded([&] {\n"
            "        for (long long i = 0; i < n; ++i) {\n"
            f"{reads}{writes}"
            f"#line 1 \"{name}\"\n{operation}\n"
            "        }\n"
            f"    }}, \"{name}\", error, error_size);\n}}\n")
    loop = build(unit, "c++17").cuda_on_cpu_elementwise
    loop.restype = ctypes.c_int
    return loop


def run_loop(loop, name: str, arrays: list[np.ndarray]) -> None:
    """Run a compiled element-wise loop over contiguous arrays of one size."""
    pointers = (ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays))
    error = ctypes.create_string_buffer(ERROR_SIZE)
    with _launching:
        outcome = loop(ctypes.c_longlong(arrays[0].size if arrays else 0), pointers, error,
                       ERROR_SIZE)
    if outcome:
        raise KernelError(error.value.decode())
