"""Fuzzing: a seeded subset of ``tools/fuzz.py``'s inputs for every entry point that
reads user input, and one test per crash the fuzzer found.

Every input must end in a result or in one of our own errors with a one-line message. A failure
names the input (TARGET:INDEX); ``python tools/fuzz.py --seed 8 --replay TARGET:INDEX``
runs it again.
"""

import contextlib
import os
import signal
import struct
import sys
import zipfile
from collections import Counter

import fuzz  # tools/fuzz.py
import numpy as np
import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.command_line import run
from support.compare import assert_agrees
from support.refusals import raises

from tspec import api, cli
from tspec.analysis.evaluate import Evaluator
from tspec.analysis.grid import parse_axis
from tspec.errors import GridError, SpecError, TspecError, UsageError, VariantError
from tspec.execution import weights
from tspec.language import parser as language

SEED = 8
COUNT = {"parse": 300, "expr": 300, "check": 300, "variant": 300, "set": 300, "grid": 200,
         "weights": 400, "cli": 150, "docs": 40, "output": 24, "printers": 10,
         "meanings": 30, "shapes": 40, "diff": 20, "run": 10, "config": 1500, "header": 1500}
TIME_LIMIT = 60.0        # only so that a hang fails the test instead of stopping the run
SHAPES = {"E": (11, 8), "W": (8,)}      # the parameters the weight-file tests expect


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    previous = signal.signal(signal.SIGALRM, fuzz._alarm)
    try:
        yield fuzz.Context(tmp_path_factory.mktemp("fuzz"))
    finally:
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.slow
@pytest.mark.parametrize("target", fuzz.TARGETS)
def test_seeded_inputs_end_in_a_result_or_one_of_our_errors(context, target):
    statuses, failures = Counter(), []
    for index in range(COUNT[target]):
        case = fuzz.make_case(target, SEED, index, context)
        status, detail = fuzz.judge(case, context, TIME_LIMIT)
        statuses[status] += 1
        if status not in ("result", "ours"):
            failures.append(f"{target}:{index} ({status}) on {case.data!r:.300}\n{detail}")
    assert not failures, "\n\n".join(failures[:3]) + f"\n\n{len(failures)} failing input(s)"
    # the generators reach past the first error: some inputs of every target are accepted
    assert statuses["result"] >= COUNT[target] // 20, statuses


def test_the_fuzzer_judges_what_is_not_a_result_or_ours(context, monkeypatch):
    case = fuzz.Case("set", 0, ["H=8"], extra={"variant": "base"})
    outcomes = {"KeyError": KeyError("x"), "empty": UsageError(""),
                "two lines": UsageError("a\nb"), "ours": UsageError("bad H")}
    judged = {}
    for name, error in outcomes.items():
        def fail(case, ctx, error=error):
            raise error
        monkeypatch.setattr(fuzz, "run_case", fail)
        judged[name] = fuzz.judge(case, context, TIME_LIMIT)[0]
    assert judged == {"KeyError": "crash", "empty": "crash", "two lines": "crash",
                      "ours": "ours"}


def test_an_input_is_the_same_every_time(context):
    first = [fuzz.make_case(t, SEED, 7, context).data for t in fuzz.TARGETS]
    again = [fuzz.make_case(t, SEED, 7, context).data for t in fuzz.TARGETS]
    assert first == again


# ---------------------------------------------------------------------------------------------
# Property-based (hypothesis, derandomized): any text or bytes at all

def _ends_well(call):
    """A call that returns, or raises our error with a one-line message."""
    try:
        return call()
    except TspecError as error:
        assert error.message.strip() and "\n" not in str(error), repr(str(error))
        return error


SETTING_TEXT = st.text(st.sampled_from("=_ -.:,0123456789eHNTdVxalmpre_ff\n\t\u0663\u00b2"),
                       max_size=24)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(SETTING_TEXT, min_size=1, max_size=3))
def test_any_set_values_end_in_a_variant_or_our_error(values):
    base = api.load("base")
    _ends_well(lambda: base.with_settings(values))


@settings(derandomize=True, max_examples=200, deadline=None)
@given(SETTING_TEXT)
def test_any_grid_text_ends_in_an_axis_or_our_error(text):
    _ends_well(lambda: parse_axis(text))


@settings(derandomize=True, max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_any_bytes_as_a_variant_file_end_in_a_variant_or_our_error(tmp_path, data):
    path = tmp_path / "v.toml"
    path.write_bytes(b'spec = "transformer"\n' + data)
    _ends_well(lambda: api.load(path))


@settings(derandomize=True, max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([".npz", ".safetensors"]), st.binary(max_size=300))
def test_any_bytes_as_a_weights_file_end_in_weights_or_our_error(tmp_path, suffix, data):
    path = tmp_path / f"w{suffix}"
    path.write_bytes(data)
    _ends_well(lambda: weights.load(path, SHAPES))


# Found by the tests above: an error quoting a value as given was two lines when the value held
# a line break

def test_a_set_value_with_a_line_break_is_quoted(capsys):
    with raises(VariantError, "--set 'H=8\\n9': dim values are positive integers, got "
                              "'8\\n9'"):
        api.load("base").with_settings(["H=8\n9"])
    code, out, err = run(capsys, "check", "base", "--set", "H=8\n9")
    assert (code, out) == (2, "")
    assert err == ("tspec: error: --set 'H=8\\n9': dim values are positive integers, got "
                   "'8\\n9'\n")


def test_a_grid_value_with_a_line_break_is_quoted():
    with raises(GridError, "--grid '=\\n': '' is not a dim name"):
        parse_axis("=\n")
    with raises(GridError, "--grid 'H=1,\\n2x': dim values are positive integers, got '2x'"):
        parse_axis("H=1,\n2x")


def test_a_path_with_a_line_break_is_quoted(tmp_path):
    (tmp_path / "a\nb").mkdir()
    with raises(UsageError, repr(str(tmp_path / "a\nb")) + " is not a file"):
        api.read_spec(tmp_path / "a\nb")


# ---------------------------------------------------------------------------------------------
# Weights: crashes found and fixed (each was a bare traceback before)

def _npy(header: str, data: bytes = b"", version: bytes = b"\x01\x00") -> bytes:
    return fuzz._npy(header, data, version)


def _array(array) -> bytes:
    return fuzz._array_bytes(array, allow_pickle=True)


def _npz(path, members, method=zipfile.ZIP_STORED):
    path.write_bytes(fuzz._zip(list(members.items()), method))
    return path


def _valid_members():
    return {f"{name}.npy": _array(np.zeros(shape, np.float32)) for name, shape in SHAPES.items()}


def _safetensors(path, header, data=b""):
    path.write_bytes(fuzz._safetensors(header, data))
    return path


def test_a_npy_file_named_npz_is_refused(tmp_path):
    path = tmp_path / "w.npz"
    path.write_bytes(_array(np.zeros((11, 8), np.float32)))         # was: TypeError
    with raises(UsageError, f"cannot read {path}: File is not a zip file"):
        weights.load(path, SHAPES)


def test_a_header_claiming_an_absurd_size_is_refused_before_any_allocation(tmp_path):
    # was: NumPy allocating 745 GiB (MemoryError), or 24 GB lazily before failing
    members = _valid_members()
    members["E.npy"] = _npy("{'descr': '<f8', 'fortran_order': False, "
                            "'shape': (100000000000,), }", bytes(16))
    path = _npz(tmp_path / "w.npz", members)
    with raises(UsageError, f"cannot read {path}: member 'E.npy' holds 16 bytes of data; its "
                            "header (shape (100000000000,), dtype float64) needs "
                            "800,000,000,000"):
        weights.load(path, SHAPES)


def test_a_header_of_the_wrong_shape_is_named_before_its_data_is_read(tmp_path):
    members = _valid_members()
    members["E.npy"] = _array(np.zeros((8, 11), np.float32))
    path = _npz(tmp_path / "w.npz", members)
    with raises(weights.WeightsError, f"{path}: parameter E has shape (8, 11); the spec "
                                      "expects (11, 8)"):
        weights.load(path, SHAPES)


@pytest.mark.parametrize("member, data, message", [
    ("E", b"hello", "member 'E' is not a .npy array"),                  # was: AttributeError
    ("E.npy", _npy("{'descr': '<f4',"),                                 # was: TokenError
     "member 'E.npy' has a malformed .npy header (EOF in multi-line statement)"),
    ("E.npy", b"hello, not an array",
     ("member 'E.npy' has a malformed .npy header (the magic string is not correct; expected "
      "b'\\x93NUMPY', got b'hello,')")),
    ("E.npy", _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (11, 8), }",
                   version=b"\x03\x00"),
     "member 'E.npy' is a .npy file of format 3.0; weights are in formats 1.0 and 2.0"),
    ("E.npy", _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"),
     "member 'E.npy' has the shape (-1,), with a negative size"),
    ("E.npy", _array(np.full((11, 8), 1.0, object)),
     "member 'E.npy' holds Python objects (a pickle), which weights never are"),
])
def test_a_member_that_is_no_array_of_ours_is_named(tmp_path, member, data, message):
    members = _valid_members()
    del members["E.npy"]
    members[member] = data
    path = _npz(tmp_path / "w.npz", members)
    with raises(UsageError, f"cannot read {path}: {message}"):
        weights.load(path, SHAPES)


def _patch_method(path, method, encrypted=False):
    """Claim another compression method (and encryption) for the first member, E.npy."""
    data = bytearray(path.read_bytes())
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    struct.pack_into("<H", data, local + 8, method)
    struct.pack_into("<H", data, central + 10, method)
    if encrypted:
        struct.pack_into("<H", data, central + 8, 1)
    path.write_bytes(bytes(data))
    return path


def test_an_unknown_compression_method_is_named(tmp_path):
    path = _patch_method(_npz(tmp_path / "w.npz", _valid_members()), 99)
    with raises(UsageError, f"cannot read {path}: member 'E.npy' is compressed with method "
                            "99, which is not one zip files of arrays use (stored, deflate, "
                            "bzip2, lzma)"):                            # was: NotImplementedError
        weights.load(path, SHAPES)


def test_an_encrypted_member_is_named(tmp_path):
    path = _patch_method(_npz(tmp_path / "w.npz", _valid_members()), 0, encrypted=True)
    with raises(UsageError, f"cannot read {path}: member 'E.npy' is encrypted"):
        weights.load(path, SHAPES)                                      # was: RuntimeError


def test_corrupt_compressed_data_is_a_usage_error(tmp_path):
    path = _npz(tmp_path / "w.npz", _valid_members(), zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    start = data.find(b"PK\x03\x04") + 30 + len("E.npy")
    data[start] = 0xFF                                # an invalid deflate block type
    path.write_bytes(bytes(data))
    with raises(UsageError, f"cannot read {path}: Error -3 while decompressing data: invalid "
                            "block type"):                             # was: zlib.error
        weights.load(path, SHAPES)


def test_a_dtype_numpy_has_no_type_for_is_named(tmp_path):
    path = _safetensors(tmp_path / "w.safetensors",
                        {"E": {"dtype": "BF16", "shape": [11, 8], "data_offsets": [0, 176]},
                         "W": {"dtype": "BF16", "shape": [8], "data_offsets": [176, 192]}},
                        bytes(192))
    with raises(weights.WeightsError, f"{path}: parameter E has dtype BF16, which NumPy has "
                                      "no type for; parameters are float16, float32 or "
                                      "float64"):                      # was: TypeError
        weights.load(path, SHAPES)


def test_an_odd_name_in_a_file_is_shown_on_one_line(tmp_path):
    path = _safetensors(tmp_path / "w.safetensors",
                        {"E": {"dtype": "F32", "shape": [11, 8], "data_offsets": [0, 352]},
                         "W\nX": {"dtype": "F32", "shape": [8], "data_offsets": [352, 384]}},
                        bytes(384))
    with raises(weights.WeightsError, f"{path}: parameters do not match the spec: missing W; "
                                      "unexpected 'W\\nX'"):
        weights.load(path, SHAPES)


def test_valid_files_still_load(tmp_path):
    params = weights.random_params(SHAPES, 1)
    for suffix in (".npz", ".safetensors"):
        weights.save(tmp_path / f"w{suffix}", params)
        loaded = weights.load(tmp_path / f"w{suffix}", SHAPES)
        np.testing.assert_array_equal(loaded["E"], params["E"])
    path = _npz(tmp_path / "c.npz", _valid_members(), zipfile.ZIP_DEFLATED)
    assert weights.load(path, SHAPES)["W"].shape == (8,)


def test_random_parameters_past_memory_are_refused(monkeypatch):
    monkeypatch.setattr(weights, "memory_bytes", lambda: 1_000_000)
    with raises(UsageError, "the parameters take 1,280,000 bytes in float32, more than the "
                            "1,000,000 bytes of memory this process may use; give smaller "
                            "dims with --set"):
        weights.random_params({"E": (1000, 320)})
    assert weights.random_params({"E": (10, 32)})["E"].shape == (10, 32)


def test_tspec_run_refuses_parameters_past_memory(capsys, monkeypatch):
    # was: a MemoryError traceback (373 TiB for E)
    monkeypatch.setattr(weights, "memory_bytes", lambda: 10 ** 12)
    code, out, err = run(capsys, "run", "base", "--set", "N=1", "--set", "V=99999999999")
    assert (code, out) == (2, "")
    assert err == ("tspec: error: base needs about 429,153.5 GiB to run in float32 (parameters "
                   "381,469.8 GiB, inputs 1.1 KiB, activations 47,683.7 GiB, overhead 962.1 KiB "
                   "for 109 arrays and 17 calls), more than the memory this process may use "
                   "(931.3 GiB): make its dims smaller with --set, or raise --max-memory\n")


# ---------------------------------------------------------------------------------------------
# Paths: crashes found and fixed

def test_a_name_too_long_for_the_system_is_a_usage_error(capsys):
    name = "a" * 300                                                    # was: OSError
    with raises(UsageError, f"cannot read {name}: File name too long"):
        api.load(name)
    code, out, err = run(capsys, "check", name)
    assert (code, out) == (2, "")
    assert err == f"tspec: error: cannot read {name}: File name too long\n"


def test_a_variant_naming_a_spec_too_long_for_the_system(tmp_path):
    path = tmp_path / "v.toml"
    path.write_text(f'spec = "{"a" * 300}"\n')                          # was: OSError
    with raises(UsageError, f"{path}:1: spec = '{'a' * 300}': cannot read "       # issue 20
                            f"{tmp_path / ('a' * 300)}: File name too long"):
        api.load(path)


# ---------------------------------------------------------------------------------------------
# Grids: crashes found and fixed, and a wrong result next to them

def test_grid_values_past_int64_are_judged_as_each_variant_alone():
    # was: TypeError('not integers: float64'): NumPy made [1, 2**63] floating point
    grid = assert_agrees("base", ["key_value_heads=grouped"], {"H_kv": [1, 2 ** 63]})
    assert [p.valid for p in grid.points()] == [True, False]


def test_a_range_past_int64_keeps_its_values():
    # was: the values wrapped round to negative numbers (2**63 as -9223372036854775808)
    grid = api.grid("base", [parse_axis("H=9223372036854775808:9223372036854775810:1")])
    assert [p.dims["H"] for p in grid.points()] == [2 ** 63, 2 ** 63 + 1, 2 ** 63 + 2]


def test_a_fixed_dim_past_int64_is_counted(capsys):
    # was: AttributeError("'int' object has no attribute 'dtype'") from the evaluator
    settings = ["N=9999999999999999999999999999999999999999", "T_dec=512"]
    point = next(assert_agrees("base", settings, {"V": [1, 2]}).points())
    assert point.parameters > 10 ** 40
    code, out, _ = run(capsys, "check", "base", "--grid", "V=1", "--set", settings[0],
                       "--set", settings[1], "--format", "csv")
    assert code == 0
    assert out.splitlines()[1] == (f"1,true,{point.parameters},{point.flops},"
                                   f"{point.activation_bytes},")


# ---------------------------------------------------------------------------------------------
# Crashes in code this branch does not own: pinned with their input until they are fixed

HEADER = 'dim B "batch"\ndim T "length"\ndim d "width"\ninput X "B T d"\n'


@contextlib.contextmanager
def _no_hang(seconds: float):
    """Turn a hang into a failure (TimeoutError) rather than stop the test run."""
    def alarm(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("constraint", ["require 2 > 2", "require T + d == 1"])
def test_constraints_no_size_satisfies_are_a_finding(constraint):
    # was: sympy's linprog refusing the program (ValueError 'A and b must both be given',
    # 'mismatched dimensions'): no dims at all, or equalities without inequalities
    report = api.check(language.parse(f"{HEADER}{constraint}\n", "t.tspec"))
    assert [(f.kind, f.message) for f in report.findings] == [
        ("unsatisfiable", f"no sizes satisfy every constraint: `{constraint}` (line 5)")]


def test_a_huge_scalar_power_in_a_tensor_expression_is_refused():
    # was: 3**(10**9) computed exactly, for as long as it takes
    with _no_hang(1.0), raises(SpecError, "t.tspec:5:21: 1.5 ** 1e9: exponents are numbers "
                                          "from -64 to 64"):
        language.parse(HEADER + 'Y "B T d" = X * 1.5 ** 1e9\n', "t.tspec")
    with _no_hang(1.0), raises(SpecError, "t.tspec:5:37: 1234567890123456789 ** 64 has more "
                                          "than 1000 digits"):
        language.parse(HEADER + 'Y "B T d" = X * 1234567890123456789 ** 64\n', "t.tspec")


def test_the_evaluator_adds_to_a_product_of_values_past_int64():
    # was: AttributeError: NumPy gives a bare int for arithmetic on two 0-d object arrays
    x, y = sympy.symbols("x y")
    assert Evaluator({x: 10 ** 40, y: 3}).value(x * y + 1).num == 3 * 10 ** 40 + 1


def test_an_unrecognized_argument_with_a_newline_gives_one_error_line(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["check", "base", "--bogus\nx"])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert err.split("\n")[-2] == "tspec: error: unrecognized arguments: --bogus\\nx"
    assert all(line.startswith(("usage: ", " ")) for line in err.split("\n")[:-2]), err


def test_tspec_run_refuses_inputs_past_memory(capsys):
    # was: numpy's ValueError('Maximum allowed dimension exceeded') drawing the inputs
    code, _, err = run(capsys, "run", "base", "--set", "N=1", "--set", "d_model=16",
                       "--set", "H=2", "--set", "d_ff=8", "--set", "V=50",
                       "--set", "B=1000000000000000000000000000000")
    assert code == 2
    assert err.startswith("tspec: error: base needs about 146,925,449,371,337,891,046,752,256.0 "
                          "GiB to run in float32 (parameters 21.1 KiB, inputs "
                          "536,441,802,978,515,618,889,728.0 GiB, activations ")
    assert err.count("\n") == 1


def test_a_worker_that_dies_has_its_input_recorded_and_every_other_judged_once(
        tmp_path, monkeypatch):
    """A worker dies at input 3 of a chunk, and again at input 1 of the part re-queued before
    it: each death is one crash, and every other input is judged exactly once (the second
    re-queue ends where its part ended, not where the whole chunk did)."""
    judge = fuzz.judge

    def dying(case, ctx, time_limit):
        marks = [tmp_path / f"died-{n}" for n in (3, 1)]
        if case.index == 3 and not marks[0].exists() or \
                case.index == 1 and marks[0].exists() and not marks[1].exists():
            marks[0 if case.index == 3 else 1].touch()
            os._exit(1)
        return judge(case, ctx, time_limit)

    monkeypatch.setattr(fuzz, "judge", dying)     # the workers are forked: they see it
    monkeypatch.setitem(sys.modules, fuzz.__name__, fuzz)    # their results unpickle by name
    with _no_hang(60.0):
        tallies, failures = fuzz.fuzz({"expr": 20}, seed=0, workers=1, time_limit=10.0,
                                      memory_limit=4 << 30, crash_dir=tmp_path / "crashes")
    assert sorted(index for _, index, _, _ in failures) == [1, 3]
    assert tallies["expr"].inputs == 20 and tallies["expr"].counts["crash"] == 2
