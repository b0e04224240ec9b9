"""A stand-in for the part of CuPy that generated code uses, on NumPy and the CPU harness.

Arrays are ``ndarray``, a NumPy array subclass that keeps CuPy's rules where NumPy's are
looser: an operation that mixes it with a NumPy array (host memory) raises TypeError, as CuPy
does, and so does a CuPy routine given one (only ``asarray`` and ``array`` move data to the
device); a reduction or an index gives a 0-d array, not a NumPy scalar; ``empty`` memory is
NaN, not zeros, so that reading what no one wrote shows. ``get()`` and ``asnumpy`` copy back.

Routines and ufuncs run through NumPy. ``RawModule``, ``RawKernel`` and ``ElementwiseKernel``
compile their CUDA text with the CPU harness (kernels.py) and run it on the arrays' memory;
``cuda.cublas.gemmStridedBatchedEx`` reads and writes memory by the pointers, leading
dimensions and strides it is given, as cuBLAS does, and computes the products by NumPy in its
compute type; ``cuda.Device().mem_info`` is the machine's memory.

Only names that CuPy has are here, so generated code that uses NumPy-only API fails on the CPU
as it would on the GPU. Type promotion is NumPy's, which CuPy follows for arrays.
"""

import ctypes
import functools
import os
import types
import weakref

import numpy as np
import scipy.special

from . import kernels

# ---------------------------------------------------------------------------------------------
# Arrays


class ndarray(np.ndarray):
    """An array in the stand-in's "device" memory: NumPy's, under CuPy's rules."""

    __array_priority__ = 100.0

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        inputs = tuple(_device(x) for x in inputs)
        if out is not None:
            kwargs["out"] = tuple(_device(o, output=True) for o in out)
        if "where" in kwargs:
            kwargs["where"] = _device(kwargs["where"])
        result = getattr(ufunc, method)(*inputs, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        return _wrap(func(*_unwrap(args), **_unwrap(kwargs)))

    def __getitem__(self, key):
        return _wrap(super().__getitem__(_unwrap(key, indices=True)))

    def __setitem__(self, key, value):
        if isinstance(value, ndarray):
            value = value.view(np.ndarray)
        super().__setitem__(_unwrap(key, indices=True), value)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def get(self, stream=None, order="C", out=None):
        """A NumPy copy (CuPy: from the device to the host)."""
        copy = np.array(self.view(np.ndarray), order=order, copy=True)
        if out is not None:
            out[...] = copy
            return out
        return copy

    @property
    def data(self):
        return MemoryPointer(self)

    @property
    def base(self):
        """CuPy's: the device array whose memory this view is in, None for one that owns its
        memory (never the NumPy array behind a stand-in array)."""
        base = np.ndarray.base.__get__(self)
        return base if isinstance(base, ndarray) else None

    @property
    def device(self):
        return Device()

    def __repr__(self):
        return "stand-in " + repr(self.view(np.ndarray))


def _device(value, output=False):
    """A stand-in array as the NumPy array it is; a NumPy array refused, as CuPy refuses host
    memory; anything else (a Python or NumPy scalar) as it is."""
    if isinstance(value, ndarray):
        return value.view(np.ndarray)
    if isinstance(value, np.ndarray) or output:
        raise TypeError(f"Unsupported type {type(value)}")
    return value


def _unwrap(value, indices=False):
    """Arguments of a routine, every stand-in array in them as NumPy's; NumPy arrays refused
    (but allowed as indices, which CuPy takes from the host)."""
    if isinstance(value, ndarray):
        return value.view(np.ndarray)
    if isinstance(value, np.ndarray):
        if indices:
            return value
        raise TypeError(f"Unsupported type {type(value)}")
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, indices) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v, indices) for k, v in value.items()}
    return value


def _wrap(value):
    """A NumPy result as the stand-in's: arrays (and scalars, as 0-d arrays) on the device."""
    if isinstance(value, np.ndarray):
        return value.view(ndarray)
    if isinstance(value, np.generic):
        return np.asarray(value).view(ndarray)
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


def _poisoned(array: np.ndarray) -> np.ndarray:
    """Fresh memory as a GPU's pool hands it out: whatever was there (NaN for floats)."""
    if array.dtype.kind == "f":
        array.fill(np.nan)
    elif array.dtype.kind in "iu":
        array.view(np.uint8).fill(0x5A)
    return array


# pointers handed out by ndarray.data, to the arrays whose memory they are in
_allocations: dict[int, weakref.ref] = {}


def _owner(array: np.ndarray) -> np.ndarray:
    """The array that owns the memory a view is in."""
    while isinstance(np.ndarray.base.__get__(array), np.ndarray):
        array = np.ndarray.base.__get__(array)
    return array


class MemoryPointer:
    """CuPy's ``x.data``: the address of the first element, as ``ptr``."""

    def __init__(self, array: ndarray):
        self.ptr = pointer = array.__array_interface__["data"][0]

        def forget(reference):                    # the owner is gone: so is its entry
            if _allocations.get(pointer) is reference:
                del _allocations[pointer]

        _allocations[pointer] = weakref.ref(_owner(array), forget)


def _memory_at(address: int, nbytes: int, what: str) -> np.ndarray:
    """nbytes of memory from ``address``, which must lie in one array handed out as a pointer:
    as a writable array of bytes."""
    owner = None
    for reference in list(_allocations.values()):
        array = reference()
        if array is None:
            continue
        low = array.__array_interface__["data"][0]
        if low <= address < low + max(array.nbytes, 1):
            owner = array
            break
    if owner is None:
        raise CUBLASError(f"{what}: pointer {address:#x} is in no array's memory")
    low = owner.__array_interface__["data"][0]
    if address + nbytes > low + owner.nbytes:
        raise CUBLASError(f"{what}: reaches {address + nbytes - low - owner.nbytes} bytes past "
                          f"the end of its array ({owner.nbytes} bytes)")
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=np.uint8)


# ---------------------------------------------------------------------------------------------
# Routines

def _routine(function):
    """A NumPy routine as CuPy's: device arrays in, device arrays out (``out`` itself where
    one is given), host arrays refused."""
    @functools.wraps(function)
    def routine(*args, **kwargs):
        result = function(*_unwrap(args), **_unwrap(kwargs))
        out = kwargs.get("out")
        return out if isinstance(out, ndarray) else _wrap(result)
    return routine


def asarray(a, dtype=None, order=None):
    """A device array of a (copied from the host where a is NumPy's or a list)."""
    if isinstance(a, ndarray) and (dtype is None or np.dtype(dtype) == a.dtype):
        return a
    source = a.view(np.ndarray) if isinstance(a, ndarray) else a
    return np.array(source, dtype=dtype, order=order or "K", copy=True).view(ndarray)


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0):
    source = obj.view(np.ndarray) if isinstance(obj, ndarray) else obj
    return np.array(source, dtype=dtype, copy=True, order=order, ndmin=ndmin).view(ndarray)


def empty(shape, dtype=float, order="C"):
    return _poisoned(np.empty(shape, dtype=dtype, order=order)).view(ndarray)


def empty_like(prototype, dtype=None, order="K", subok=None, shape=None):
    base = _device(prototype)
    return _poisoned(np.empty_like(base, dtype=dtype, order=order, shape=shape)).view(ndarray)


def asnumpy(a, stream=None, order="C", out=None):
    if isinstance(a, ndarray):
        return a.get(order=order, out=out)
    return np.asarray(a, order=order)


def get_array_module(*args):
    return module


_ROUTINES = [
    "ascontiguousarray", "asfortranarray", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "linspace", "eye", "identity", "tri", "tril", "triu", "copy",
    "reshape", "ravel", "moveaxis", "swapaxes", "transpose", "broadcast_to",
    "broadcast_arrays", "broadcast", "expand_dims", "squeeze", "concatenate", "stack", "split",
    "repeat", "tile", "flip", "where", "copyto", "take", "take_along_axis", "argwhere",
    "nonzero", "sum", "mean", "var", "std", "max", "amax", "min", "amin", "argmax", "argmin",
    "prod", "cumsum", "all", "any", "matmul", "dot", "einsum", "clip", "isfinite", "isnan",
    "isinf", "may_share_memory", "shares_memory", "result_type", "can_cast"]
_UFUNCS = [
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "negative",
    "positive", "power", "square", "sqrt", "exp", "expm1", "log", "log1p", "tanh", "sinh",
    "cosh", "sin", "cos", "tan", "arctan", "maximum", "minimum", "fmax", "fmin", "abs",
    "absolute", "sign", "floor", "ceil", "rint", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "logical_and", "logical_or", "logical_not", "logical_xor",
    "reciprocal", "logaddexp"]
_FROM_NUMPY = [
    "dtype", "finfo", "iinfo", "float16", "float32", "float64", "int8", "int16", "int32",
    "int64", "uint8", "uint16", "uint32", "uint64", "bool_", "integer", "floating", "number",
    "signedinteger", "unsignedinteger", "inexact", "generic", "inf", "nan", "pi", "e",
    "newaxis", "promote_types"]


# ---------------------------------------------------------------------------------------------
# Kernels

def _is_array(value) -> bool:
    if isinstance(value, np.ndarray) and not isinstance(value, ndarray):
        raise TypeError(f"Unsupported type {type(value)}")
    return isinstance(value, ndarray)


class RawModule:
    """CuPy's RawModule: CUDA source whose kernels get_function names (a name expression)."""

    def __init__(self, code=None, *, path=None, options=(), backend="nvrtc",
                 translate_cucomplex=False, enable_cooperative_groups=False,
                 name_expressions=None, jitify=False):
        if code is None:
            raise NotImplementedError("the stand-in compiles RawModule code, not files")
        self.code, self.options = code, tuple(options)
        self.name_expressions = tuple(name_expressions or ())

    def get_function(self, name):
        return _kernel(self.code, name, self.options)


@functools.cache
def _kernel(code, name, options):
    return kernels.Kernel(code, name, options, is_array=_is_array)


def RawKernel(code, name, options=(), backend="nvrtc", translate_cucomplex=False,
              enable_cooperative_groups=False, jitify=False):
    return _kernel(code, name, tuple(options))


class ElementwiseKernel:
    """CuPy's ElementwiseKernel: an operation on each element of its arrays broadcast to one
    shape, its type placeholders (T) bound by the arrays' dtypes."""

    def __init__(self, in_params, out_params, operation, name="kernel", reduce_dims=True,
                 preamble="", no_return=False, return_tuple=False, **kwargs):
        self.inputs = kernels.parse_parameters(in_params)
        self.outputs = kernels.parse_parameters(out_params)
        self.operation, self.name, self.preamble = operation, name, preamble
        self.return_tuple = return_tuple

    def __call__(self, *args, size=None, block_size=None):
        count = len(self.inputs)
        if len(args) not in (count, count + len(self.outputs)):
            raise TypeError(f"{self.name}: wrong number of arguments: {len(args)}")
        for value in args:
            if not isinstance(value, ndarray):
                raise TypeError(f"Unsupported type {type(value)}")
        bound: dict[str, np.dtype] = {}
        for (written, name), value in zip(self.inputs + self.outputs, args):
            if kernels.type_name(written) is None:
                if written in bound and bound[written] != value.dtype:
                    raise TypeError(f"Type is mismatched. {name} {value.dtype} "
                                    f"{bound[written]}")
                bound.setdefault(written, value.dtype)
        for written, name in self.outputs:
            if kernels.type_name(written) is None and written not in bound:
                raise TypeError(f"{self.name}: the type of {name} ({written}) is not bound")
        shape = np.broadcast_shapes(*(a.shape for a in args[:count]))
        outs = args[count:]
        for value in outs:
            if value.shape != shape:
                raise ValueError(f"Out shape is mismatched: {value.shape} against {shape}")
        types = {placeholder: dtype.name for placeholder, dtype in bound.items()}
        loop = _elementwise(tuple(self.inputs), tuple(self.outputs), self.operation,
                            self.preamble, self.name, tuple(sorted(types.items())))

        def dtype_of(written):
            return np.dtype(types.get(written) or kernels.type_name(written))

        reads = [np.ascontiguousarray(np.broadcast_to(a.view(np.ndarray), shape),
                                      dtype=dtype_of(written))
                 for (written, _), a in zip(self.inputs, args)]
        writes = [_poisoned(np.empty(shape, dtype=dtype_of(written)))
                  for written, _ in self.outputs]
        if np.prod(shape, dtype=np.int64):
            kernels.run_loop(loop, self.name, reads + writes)
        results = []
        for index, result in enumerate(writes):
            if outs:
                outs[index].view(np.ndarray)[...] = result
                results.append(outs[index])
            else:
                results.append(result.view(ndarray))
        return tuple(results) if len(results) > 1 or self.return_tuple else results[0]


@functools.cache
def _elementwise(inputs, outputs, operation, preamble, name, types):
    return kernels.elementwise_loop(list(inputs), list(outputs), operation, preamble, name,
                                    dict(types))


# ---------------------------------------------------------------------------------------------
# cupy.cuda: the device, cuBLAS

class CUBLASError(RuntimeError):
    pass


class CUDARuntimeError(RuntimeError):
    pass


class CUDADriverError(RuntimeError):
    pass


class Device:
    """The one device: the CPU, with the machine's memory as its own."""

    def __init__(self, device=None):
        self.id = 0

    @property
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes: the machine's available and physical memory."""
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        free = total
        try:
            with open("/proc/meminfo", encoding="ascii") as meminfo:
                for line in meminfo:
                    if line.startswith("MemAvailable:"):
                        free = int(line.split()[1]) * 1024
        except OSError:
            pass
        return free, total

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def use(self):
        return self


def get_cublas_handle() -> int:
    return 1


# cuBLAS's codes: cudaDataType (CUDA_R_16F 2, CUDA_R_32F 0, CUDA_R_64F 1), cublasComputeType_t
DATA_TYPES = {2: np.dtype(np.float16), 0: np.dtype(np.float32), 1: np.dtype(np.float64)}
# (A and B type, C type, compute type) -> the dtype products are summed in, and alpha's type
GEMM_COMBINATIONS = {(2, 2, 64): (np.float16, ctypes.c_uint16),     # CUBLAS_COMPUTE_16F
                     (2, 2, 68): (np.float32, ctypes.c_float),      # CUBLAS_COMPUTE_32F
                     (2, 0, 68): (np.float32, ctypes.c_float),
                     (0, 0, 68): (np.float32, ctypes.c_float),
                     (1, 1, 70): (np.float64, ctypes.c_double)}     # CUBLAS_COMPUTE_64F
INT32 = (-2**31, 2**31 - 1)


def _matrices(address, dtype, rows, cols, ld, transposed, stride, count, what):
    """op(X) of each of ``count`` column-major matrices, stride elements apart: count x rows x
    cols, a view of the memory they are in (checked to be one array's)."""
    item = dtype.itemsize
    steps = (stride, ld, 1) if transposed else (stride, 1, ld)   # batch, row, column
    last = sum((n - 1) * s for n, s in zip((count, rows, cols), steps))
    memory = _memory_at(address, (last + 1) * item, what).view(dtype)
    return np.lib.stride_tricks.as_strided(memory, (count, rows, cols),
                                           tuple(s * item for s in steps))


def gemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha,
                         A, Atype, lda, strideA, B, Btype, ldb, strideB, beta,
                         C, Ctype, ldc, strideC, batchCount, computeType, algo):
    """C_i = alpha op(A_i) op(B_i) + beta C_i for i < batchCount, every matrix column-major,
    as cublasGemmStridedBatchedEx: the same checks of its arguments, the memory read and
    written through the pointers, the products summed in the compute type."""
    for value in (m, n, k, lda, ldb, ldc, batchCount):
        if not INT32[0] <= value <= INT32[1]:
            raise OverflowError("value too large to convert to int")
    if transa not in (0, 1, 2) or transb not in (0, 1, 2):
        raise CUBLASError("CUBLAS_STATUS_INVALID_VALUE: transa and transb are 0, 1 or 2")
    if (Atype, Ctype, computeType) not in GEMM_COMBINATIONS or Btype != Atype:
        raise CUBLASError(f"CUBLAS_STATUS_NOT_SUPPORTED: types A {Atype}, B {Btype}, C {Ctype}, "
                          f"compute {computeType}")
    a_rows = k if transa else m
    b_rows = n if transb else k
    if min(m, n, k, batchCount) < 0 or lda < max(1, a_rows) or ldb < max(1, b_rows) or \
            ldc < max(1, m):
        raise CUBLASError(f"CUBLAS_STATUS_INVALID_VALUE: m {m}, n {n}, k {k}, lda {lda}, "
                          f"ldb {ldb}, ldc {ldc}, batchCount {batchCount}")
    if m == 0 or n == 0 or batchCount == 0:
        return
    compute, scalar = GEMM_COMBINATIONS[(Atype, Ctype, computeType)]
    one, zero = (scalar.from_address(p).value for p in (alpha, beta))
    if scalar is ctypes.c_uint16:
        one, zero = (np.array(v, np.uint16).view(np.float16) for v in (one, zero))
    c = _matrices(C, DATA_TYPES[Ctype], m, n, ldc, False, strideC, batchCount, "C")
    result = np.zeros(c.shape, dtype=compute)
    if k and one != 0:
        a = _matrices(A, DATA_TYPES[Atype], m, k, lda, bool(transa), strideA, batchCount, "A")
        b = _matrices(B, DATA_TYPES[Btype], k, n, ldb, bool(transb), strideB, batchCount, "B")
        result = compute(one) * np.matmul(a.astype(compute), b.astype(compute))
    if zero != 0:                                   # beta 0: C is written, never read
        result = result + compute(zero) * c.astype(compute)
    c[...] = result


# ---------------------------------------------------------------------------------------------
# The modules: cupy, cupy.cuda (device, cublas, runtime, compiler, driver), cupyx.scipy.special

def _module(name: str, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def _make_modules() -> dict[str, types.ModuleType]:
    device = _module("cupy.cuda.device", Device=Device, get_cublas_handle=get_cublas_handle)
    cublas = _module("cupy.cuda.cublas", gemmStridedBatchedEx=gemmStridedBatchedEx,
                     CUBLASError=CUBLASError)
    runtime = _module("cupy.cuda.runtime", getDeviceCount=lambda: 1,
                      CUDARuntimeError=CUDARuntimeError)
    compiler = _module("cupy.cuda.compiler", CompileException=kernels.CompileError)
    driver = _module("cupy.cuda.driver", CUDADriverError=CUDADriverError)
    cuda = _module("cupy.cuda", Device=Device, device=device, cublas=cublas, runtime=runtime,
                   compiler=compiler, driver=driver, is_available=lambda: True)
    cupy = _module("cupy", ndarray=ndarray, cuda=cuda, asarray=asarray, array=array,
                   empty=empty, empty_like=empty_like, asnumpy=asnumpy,
                   get_array_module=get_array_module, RawModule=RawModule, RawKernel=RawKernel,
                   ElementwiseKernel=ElementwiseKernel, __version__="stand-in",
                   __doc__="CuPy's API on NumPy and the CPU harness (tests/support/cupy_on_cpu)")
    for name in _ROUTINES:
        setattr(cupy, name, _routine(getattr(np, name)))
    for name in _UFUNCS:
        setattr(cupy, name, _routine(getattr(np, name)))
    for name in _FROM_NUMPY:
        setattr(cupy, name, getattr(np, name))
    special = _module("cupyx.scipy.special", erf=_routine(scipy.special.erf))
    scipy_module = _module("cupyx.scipy", special=special)
    cupyx = _module("cupyx", scipy=scipy_module)
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.device": device,
            "cupy.cuda.cublas": cublas, "cupy.cuda.runtime": runtime,
            "cupy.cuda.compiler": compiler, "cupy.cuda.driver": driver, "cupyx": cupyx,
            "cupyx.scipy": scipy_module, "cupyx.scipy.special": special}


MODULES = _make_modules()
module = MODULES["cupy"]
