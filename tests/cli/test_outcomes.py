"""The command line's promise, for every command and every way it can end: an exit status
(0, 1, 2; 130 after Ctrl-C, 141 when the reader went away) and for an error one line on
stderr, never a traceback: output to a closed pipe, a full device, a stream that cannot encode
it; files that cannot be written; Ctrl-C; errors raised by generated code; numbers too long to
print (tspec.cli.main is the one place that turns outcomes into statuses)."""

import errno
import io
import os
import re
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from support.command_line import ROOT, run
from support.refusals import raises

from tspec import __main__ as entry
from tspec import api, audit, cli, files
from tspec.codegen import generate
from tspec.docs import site as docs
from tspec.errors import SpecError
from tspec.execution import checkpoints, weights
from tspec.execution import run as run_module
from tspec.execution.weights import WeightsError
from tspec.numbers import SHOWN_DIGITS, expr_text, integer_text, shown_json, value_text
from tspec.symbolic.expr import parse_expression, to_sympy
from tspec.symbolic.shape import dim_symbol

TINY = ["--set", "N=1", "--set", "d_model=16", "--set", "H=2", "--set", "d_ff=8",
        "--set", "V=50", "--set", "T=4", "--set", "T_dec=4"]
FULL = "tspec: error: cannot write the output: No space left on device\n"


def commands(out) -> dict[str, list[str]]:
    """Every command, each writing what it writes under ``out``."""
    return {
        "check": ["check", "seed_000"],
        "shapes": ["shapes", "base"],
        "diff": ["diff", "base", "big"],
        "list": ["list"],
        "audit": ["audit", "--out", str(out / "audit.md")],
        "docs": ["docs", "base", "--format", "md", "--out", str(out / "docs")],
        "generate": ["generate", "--backend", "numpy", "--out", str(out / "generated")],
        "run": ["run", "base", *TINY],
        "grid": ["check", "gpt2_small", "--grid", "H=8,10"],
    }


def tspec_process(argv, stdout, unbuffered: bool, **options) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        environment["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen([sys.executable, "-m", "tspec", *argv], stdout=stdout,
                            stderr=subprocess.PIPE, env=environment, cwd=ROOT, **options)


def finished(argv, output: str, unbuffered: bool) -> tuple[int, bytes]:
    """Exit status and stderr of a command whose output goes to a pipe whose reader has
    gone before it starts ("closed"), or to /dev/full ("full")."""
    if output == "closed":
        reader, writer = os.pipe()
        os.close(reader)
        try:
            process = tspec_process(argv, writer, unbuffered)
        finally:
            os.close(writer)
    else:
        with open("/dev/full", "wb") as full:
            process = tspec_process(argv, full, unbuffered)
    _, err = process.communicate(timeout=300)
    return process.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize("output, status, message", [("closed", 141, b""),
                                                     ("full", 2, FULL.encode())])
def test_every_command_ends_in_one_status_when_its_output_cannot_be_written(
        tmp_path, output, status, message):
    # before: exit 120 and "Exception ignored ... BrokenPipeError" (or OSError: No space left
    # on device) from the interpreter's own flush at exit, unless PYTHONUNBUFFERED was set
    cases = [(name, argv, unbuffered) for name, argv in commands(tmp_path).items()
             for unbuffered in (False, True)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda case: finished(case[1], output, case[2]), cases))
    wrong = [(name, unbuffered, code, err) for (name, _, unbuffered), (code, err)
             in zip(cases, results) if (code, err) != (status, message)]
    assert wrong == []


class FullDevice(io.StringIO):
    """An output whose device is full: every write and flush fails (and it has no file to
    point away)."""

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        self.write("")


def test_output_that_fails_is_reported_once(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", FullDevice())
    assert cli.main(["list"]) == 2
    assert capsys.readouterr().err == FULL


def test_a_command_whose_output_is_closed_from_the_start_writes_nothing_and_succeeds():
    process = tspec_process(["list"], subprocess.DEVNULL, False,
                            pass_fds=(), preexec_fn=lambda: os.close(1))
    _, err = process.communicate(timeout=300)
    assert (process.returncode, err) == (0, b"")


@pytest.mark.slow
def test_ctrl_c_in_a_proof_ends_in_one_line_and_130(tmp_path):
    # shapes that are polynomials of degree 53 to 60: comparing them takes sympy seconds each
    # (about 24 s in all), so the signal comes while the check runs
    path = tmp_path / "slow.tspec"
    path.write_text('dim a "a"\ndim b "b"\ndim c "c"\n' + "".join(
        f'input X{i} "(a+b+c)**{53 + i} (a*b+c)**40"\n'
        f'Y{i} "(a+b+c)**{53 + i} (a*b+c)**40" = X{i} * 2\n' for i in range(8)) + "output Y0\n")
    # as a terminal's Ctrl-C meets it: SIGINT at its default, whatever this run inherited (a
    # test run started in the background of a shell ignores SIGINT, and so would tspec)
    process = tspec_process(["check", str(path), "--time-limit", "600"], subprocess.PIPE, False,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(4)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (130, b"tspec: interrupted\n")


def test_ctrl_c_while_tspec_is_still_importing_is_one_line_and_130(monkeypatch, capsys):
    class Interrupted:                 # Ctrl-C as the import of tspec.cli runs
        def find_spec(self, name, path=None, target=None):
            if name == "tspec.cli":
                raise KeyboardInterrupt
    monkeypatch.delitem(sys.modules, "tspec.cli")
    monkeypatch.setattr(sys, "meta_path", [Interrupted(), *sys.meta_path])
    assert entry.main() == 130
    assert capsys.readouterr().err == "tspec: interrupted\n"


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("name, where", [
    ("check", (api, "check")), ("shapes", (api, "shapes")), ("diff", (api, "diff")),
    ("list", (api, "load")), ("audit", (audit, "render")), ("docs", (docs, "write")),
    ("generate", (generate, "write")), ("run", (run_module, "run")), ("grid", (api, "grid")),
])
def test_ctrl_c_in_any_command_is_one_line_and_130(capsys, monkeypatch, tmp_path, name, where):
    monkeypatch.setattr(*where, interrupted)
    assert run(capsys, *commands(tmp_path)[name])[::2] == (130, "tspec: interrupted\n")


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
@pytest.mark.parametrize("name", ["check", "shapes", "diff", "list", "audit", "docs",
                                  "generate", "run", "grid"])
def test_output_the_terminal_cannot_encode_is_written_escaped(monkeypatch, tmp_path, encoding,
                                                               name):
    # before: UnicodeEncodeError (a traceback) at the grid's em dash for a missing count
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    monkeypatch.setattr(sys, "stdout", stream)
    code = cli.main(commands(tmp_path)[name])
    stream.flush()
    text = stream.buffer.getvalue().decode(encoding)
    assert code in (0, 1)
    if name == "grid":
        assert "\\u2014" in text and "—" not in text


def test_the_grid_to_an_ascii_terminal_as_a_process():
    environment = {**os.environ, "PYTHONIOENCODING": "ascii"}
    result = subprocess.run([sys.executable, "-m", "tspec", "check", "base", "--grid",
                             "H=8,10"], capture_output=True, env=environment, cwd=ROOT,
                            timeout=300, check=False)
    assert (result.returncode, result.stderr) == (1, b"")
    assert re.search(rb"\n10 +no +\\u2014 +\\u2014 +\\u2014 +require d_model % H == 0",
                     result.stdout)


# -- files that cannot be written

@pytest.mark.parametrize("name, target", [
    ("audit", "audit.md"), ("docs", "docs/base.md"), ("generate", "generated/numpy/__init__.py")])
def test_a_full_disk_names_the_file(capsys, monkeypatch, tmp_path, name, target):
    def full(source, destination):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files.os, "replace", full)
    code, out, err = run(capsys, *commands(tmp_path)[name])
    assert (code, out) == (2, "")
    assert err == f"tspec: error: cannot write {tmp_path / target}: No space left on device\n"
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("name, target", [
    ("audit", "audit.md"), ("docs", "docs/base.md"), ("generate", "generated/numpy/__init__.py")])
def test_a_read_only_file_system_names_the_file(capsys, monkeypatch, tmp_path, name, target):
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):      # no file can be made
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", "/somewhere/.x.tmp")
        return real_open(path, flags, *args, **kwargs)
    monkeypatch.setattr(files.os, "open", read_only)
    code, _, err = run(capsys, *commands(tmp_path)[name])
    assert code == 2
    assert err == f"tspec: error: cannot write {tmp_path / target}: Read-only file system\n"


@pytest.mark.parametrize("name, target, written", [
    ("audit", "audit.md", "audit.md"), ("docs", "docs", "docs/base.md"),
    ("generate", "generated", "generated/numpy/__init__.py")])
def test_an_output_path_naming_a_file_where_a_folder_goes_is_one_line(capsys, tmp_path, name,
                                                                        target, written):
    # before: NotADirectoryError / FileExistsError tracebacks
    (tmp_path / target.split("/")[0]).write_text("a file\n")
    if name == "audit":              # the report itself may be a file; its folder may not
        (tmp_path / "audit.md").unlink()
        (tmp_path / "sub").write_text("a file\n")
        code, _, err = run(capsys, "audit", "--out", str(tmp_path / "sub" / "audit.md"))
        assert (code, err) == (2, (f"tspec: error: cannot write {tmp_path / 'sub/audit.md'}: "
                                   f"{tmp_path / 'sub'} is not a folder\n"))
        return
    code, _, err = run(capsys, *commands(tmp_path)[name])
    assert (code, err) == (2, (f"tspec: error: cannot write {tmp_path / written}: "
                               f"{tmp_path / target} is not a folder\n"))


@pytest.mark.parametrize("name", ["docs", "generate"])
def test_an_output_folder_in_a_loop_of_symbolic_links_is_one_line(capsys, tmp_path, name):
    # before: RuntimeError('Symlink loop from ...') from pathlib, a traceback
    loop = tmp_path / name.replace("generate", "generated")
    loop.symlink_to(loop)
    code, _, err = run(capsys, *commands(tmp_path)[name])
    assert code == 2
    assert re.fullmatch(rf"tspec: error: cannot write {re.escape(str(loop))}/\S+: "
                        r"(symbolic links in its path lead round in a loop|"
                        rf"{re.escape(str(loop))} is not a folder)\n", err), err


def test_audit_to_a_folder_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "audit", "--out", str(tmp_path))
    assert (code, err) == (2, f"tspec: error: cannot write {tmp_path}: Is a directory\n")


def test_a_file_size_limit_is_a_full_disk_for_generate(tmp_path):
    # the kernel refuses the write past RLIMIT_FSIZE (Python ignores SIGXFSZ): EFBIG
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    process = tspec_process(["generate", "--backend", "numpy", "--out", str(tmp_path)],
                            subprocess.PIPE, False, preexec_fn=limit)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 2
    assert re.fullmatch(rf"tspec: error: cannot write {re.escape(str(tmp_path))}/numpy/"
                        r"\w+\.py: File too large\n", err.decode()), err
    assert out == b""


# -- other outcomes

def test_a_time_limit_past_the_timers_range_is_timed_by_the_clock(capsys):
    # before: OverflowError('timestamp out of range for platform time_t') from setitimer
    assert run(capsys, "check", "base", "--time-limit", "1e10")[0] == 0
    assert run(capsys, "check", "base", "--time-limit", "1e300")[0] == 0


def test_an_os_error_no_command_names_is_one_line(capsys, monkeypatch):
    def unreadable(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", "spec/variants/base.toml")
    monkeypatch.setattr(api, "load", unreadable)
    assert run(capsys, "shapes", "base")[::2] == (
        2, "tspec: error: spec/variants/base.toml: Permission denied\n")


def test_running_out_of_memory_is_one_line(capsys, monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(api, "diff", exhausted)
    assert run(capsys, "diff", "base", "big")[::2] == (2, "tspec: error: out of memory\n")


def test_a_defect_of_tspecs_own_is_one_line_and_70(capsys, monkeypatch):
    def defect(*args, **kwargs):
        raise ValueError("a defect\nin two lines")
    monkeypatch.setattr(api, "check", defect)
    code, out, err = run(capsys, "check", "base")
    assert (code, out) == (70, "")
    assert re.fullmatch(r"tspec: internal error: ValueError: a defect\\nin two lines \(at "
                        r"test_outcomes\.py:\d+; please report it; TSPEC_TRACEBACK=1 shows the "
                        r"traceback\)\n", err), err
    monkeypatch.setenv("TSPEC_TRACEBACK", "1")
    with pytest.raises(ValueError, match="a defect"):
        cli.main(["check", "base"])


# -- tspec run

def changing_generated_code(monkeypatch, change) -> None:
    """Every module `tspec run` generates, changed by ``change(module)`` once loaded."""
    real = run_module.load_source

    def load_source(text, **options):
        module = real(text, **options)
        change(module)
        return module
    monkeypatch.setattr(run_module, "load_source", load_source)


def test_an_error_raised_by_generated_code_names_its_functions_and_exits_1(capsys, monkeypatch):
    # before: a traceback through the generated module (a ValueError from decode_step)
    def rotary(X, *args, **kwargs):
        raise ValueError("positions 3 to 4 need\n5 rows")
    changing_generated_code(monkeypatch,
                            lambda module: monkeypatch.setattr(module.rt, "rotary", rotary))
    code, out, err = run(capsys, "run", "llama3_8b", "--set", "N=1", "--set", "d_model=16",
                         "--set", "H=2", "--set", "H_kv=1", "--set", "d_ff=8", "--set", "V=50",
                         "--set", "T_dec=4", "--decode", "2")
    assert (code, out) == (1, "")
    assert err == ("tspec: error: llama3_8b: the generated code raised ValueError in "
                   "transformer > decoder > decoder_layer > multi_head_attention: positions 3 "
                   "to 4 need 5 rows\n")


def test_an_error_raised_by_a_decoding_step_names_it(capsys, monkeypatch):
    def without_its_cache(module):
        step = module.decode_step
        module.decode_step = lambda *args, **kwargs: step(*args[:-1], None, **kwargs)
    changing_generated_code(monkeypatch, without_its_cache)
    code, out, err = run(capsys, "run", "gpt2_small", "--set", "N=1", "--set", "d_model=16",
                         "--set", "H=2", "--set", "d_ff=8", "--set", "V=50", "--set",
                         "T_dec=4", "--decode", "2")
    assert (code, out) == (1, "")
    assert err == ("tspec: error: gpt2_small: the generated code raised ValueError in "
                   "decode_step > rt.check_cache: cache['decoder'] is missing: pass the cache "
                   "prefill returned\n")


def test_a_memory_error_in_generated_code_is_a_refusal(capsys, monkeypatch):
    def layer_norm(*args, **kwargs):
        raise MemoryError("layer_norm needs about 3.0 GiB, more than the limit")
    changing_generated_code(monkeypatch, lambda module: monkeypatch.setattr(
        module.rt, "layer_norm", layer_norm))
    code, _, err = run(capsys, "run", "base", *TINY)
    assert (code, err) == (2, ("tspec: error: base: layer_norm needs about 3.0 GiB, more "
                               "than the limit\n"))


def test_an_array_of_more_than_64_axes_is_refused_before_the_run(capsys, tmp_path):
    # before: NumPy's ValueError drawing the random input, a traceback
    axes = " ".join(["a"] * 65)
    path = tmp_path / "rank.tspec"
    path.write_text(f'dim a "one"\ninput X "{axes}" "x"\nY "{axes}" "y" = relu(X)\noutput Y\n')
    code, out, err = run(capsys, "run", str(path), "--set", "a=1")
    assert (code, out) == (2, "")
    assert err == "tspec: error: X has 65 axes; arrays have at most 64, so rank cannot run\n"


def test_a_spec_path_that_is_not_utf8_runs_and_is_shown_escaped(capsys, tmp_path):
    # before: UnicodeEncodeError compiling the generated module, whose docstring names the path
    path = tmp_path / os.fsdecode(b"bad\xff.tspec")
    path.write_text('spec s "t"\ndim B "b"\ndim d "d"\ninput X "B d" "x"\nparam W "d d" "w"\n'
                    'Y "B d" "y" = X @ W\noutput Y\n')
    code, out, err = run(capsys, "run", str(path), "--set", "d=4", "--set", "B=1")
    assert (code, err) == (0, "")
    assert "Y  1 x 4" in out.splitlines()
    assert run(capsys, "docs", str(path), "--format", "md", "--out", str(tmp_path / "d"))[0] == 0
    page = (tmp_path / "d" / "s.md").read_text(encoding="utf-8")
    assert f"from {tmp_path}/bad\\\\xff.tspec (sha256 " in page   # Markdown: \\ is a backslash


NOT_PLAIN = "is not a plain identifier (ASCII letter first, then letters, digits, underscores)"


@pytest.mark.parametrize("stem, reason", [
    (os.fsdecode(b"bad\xff"), f"'bad\\udcff' {NOT_PLAIN}"),
    ("my-spec", f"'my-spec' {NOT_PLAIN}"),
    ("class", "'class' is a Python keyword"),
    ("list", "'list' shadows a Python builtin"),
])
def test_a_spec_named_after_a_file_name_code_cannot_use_is_refused(capsys, tmp_path, stem,
                                                                     reason):
    # before: "internal error: the code generated ... does not parse", or UnicodeEncodeError
    path = tmp_path / f"{stem}.tspec"
    path.write_text('dim B "b"\ndim d "d"\ninput X "B d" "x"\nparam W "d d" "w"\n'
                    'Y "B d" "y" = X @ W\noutput Y\n')
    code, out, err = run(capsys, "run", str(path), "--set", "d=4", "--set", "B=1")
    assert (code, out) == (2, "")
    shown = str(path).replace("\udcff", "\\udcff")
    assert err == (f"tspec: error: {shown}: spec name {reason}; it is the spec's file name, as "
                   'the spec has no `spec NAME "title"` line: give it one\n')


# -- numbers too long to print

HUGE = ('dim B "batch"\ndim T "length"\ndim d "width"\ndim k "huge"\nlet k = d**64 * d**64 * '
        'd**64\n{require}input X "B T d" "x"\nparam W "d k" "w"\nparam W2 "k d" "w2"\n'
        'Y "B T d" "y" = X @ W @ W2\noutput Y\n')
NINES = "9" * 40


@pytest.fixture
def huge(tmp_path):
    """A spec whose derived dim k has 7,680 digits at d = 10**40 - 1, and variants of it."""
    (tmp_path / "huge.tspec").write_text(HUGE.format(require=""))
    (tmp_path / "broken.tspec").write_text(HUGE.format(require="require k <= 3\n"))
    for name, spec, d in (("a", "huge", NINES), ("b", "huge", "9" * 39), ("c", "broken", NINES)):
        (tmp_path / f"{name}.toml").write_text(f'spec = "{spec}.tspec"\n[dims]\nd = {d}\n')
    return tmp_path


def test_check_shows_a_huge_derived_dim_rounded(capsys, huge):
    # before: ValueError('Exceeds the limit (4300 digits) for integer string conversion')
    code, out, err = run(capsys, "check", str(huge / "c.toml"))
    assert (code, err) == (1, "")
    assert f"{huge}/broken.tspec:6: constraint-violated: k <= 3 does not hold for " \
           "k=~1.000e7680" in out.splitlines()
    assert "    dims: k=~1.000e7680" in out.splitlines()
    code, out, _ = run(capsys, "check", str(huge / "c.toml"), "--format", "json")
    assert '"k": "~1.000e7680"' in out


def test_shapes_show_a_huge_dim_rounded(capsys, huge):
    code, out, err = run(capsys, "shapes", str(huge / "a.toml"))
    assert (code, err) == (0, "")
    assert ["W", "param", "float", "d k", f"{NINES} ~1.000e7680"] == \
        re.split(r" {2,}", next(line for line in out.splitlines() if line.startswith("W ")))
    code, out, _ = run(capsys, "shapes", str(huge / "a.toml"), "--format", "json")
    assert f'"concrete": "{NINES} ~1.000e7680"' in out


def test_diff_shows_huge_counts_rounded(capsys, huge):
    code, out, err = run(capsys, "diff", str(huge / "a.toml"), str(huge / "b.toml"))
    assert (code, err) == (1, "")
    assert ["parameters", "~2.000e7720 ->", "~2.000e7527", "-~2.000e7720 (-100.0%)"] in [
        re.split(r" {2,}", line.strip()) for line in out.splitlines()]
    assert ["k", "~1.000e7680 ->", "~1.000e7488"] in [
        re.split(r" {2,}", line.strip()) for line in out.splitlines()]
    code, out, _ = run(capsys, "diff", str(huge / "a.toml"), str(huge / "b.toml"), "--format",
                       "json")
    assert '"a": "~2.000e7720"' in out


def test_a_grid_shows_huge_counts_rounded(capsys, huge):
    grid = ["check", str(huge / "huge.tspec"), "--grid", f"d={NINES}"]
    code, out, err = run(capsys, *grid)
    assert (code, err) == (0, "")
    assert re.split(r" {2,}", out.splitlines()[-3]) == [
        NINES, "yes", "~2.000e7720", "~2.048e7723",
        "20,479,999,999,999,999,999,999,999,999,999,999,999,997,952"]
    assert run(capsys, *grid, "--format", "csv")[1].splitlines()[1] == (
        f"{NINES},true,~2.000e7720,~2.048e7723,20479999999999999999999999999999999999997952,")
    assert '"parameters": "~2.000e7720"' in run(capsys, *grid, "--format", "json")[1]


def test_docs_show_huge_counts_rounded(capsys, huge):
    code, _, err = run(capsys, "docs", str(huge / "a.toml"), "--out", str(huge / "docs"))
    assert (code, err) == (0, "")
    page = (huge / "docs" / "a.md").read_text(encoding="utf-8")
    assert "| $k$ | huge | \\~1.000e7680 | $k = d^{192}$ | — |" in page   # Markdown: \\~ is ~


def test_run_refuses_huge_sizes_with_the_estimate_rounded(capsys, huge):
    # before: OverflowError('integer division result too large for a float') in size_text
    code, out, err = run(capsys, "run", str(huge / "a.toml"))
    assert (code, out) == (2, "")
    assert err.startswith("tspec: error: a needs about ~7.451e7711 GiB to run in float32 "
                          "(parameters ~7.451e7711 GiB, inputs ")


def test_a_constant_folded_past_a_thousand_digits_is_refused():
    symbols = {"d": dim_symbol("d")}
    node = parse_expression(f"{'9' * 38}**25 * {'9' * 38}**25 * d", "s.tspec")
    with raises(SpecError, f"s.tspec:1:89: let k: {'9' * 38} ** 25 * "
                           f"{'9' * 38} ** 25 * d makes a number of more than 1000 digits"):
        to_sympy(node, symbols, file="s.tspec", what="let k")


def test_integers_are_exact_up_to_a_thousand_digits_and_rounded_past():
    assert integer_text(10 ** SHOWN_DIGITS - 1) == "9" * 1000
    assert integer_text(10 ** SHOWN_DIGITS) == "~1.000e1000"
    assert integer_text(-(2 ** 20000)) == "-~3.980e6020"
    assert integer_text(12345678, grouped=True) == "12,345,678"
    assert integer_text(99996 * 10 ** 5000) == "~1.000e5005"    # the mantissa rounds up
    assert value_text(7) == "7"
    from fractions import Fraction
    assert value_text(Fraction(10 ** 1001, 3)) == "~1.000e1001/3"
    symbol = dim_symbol("d")
    assert expr_text(3 ** 3000 * symbol) == "~2.311e1431*d"
    assert expr_text(symbol / 2) == "d/2"
    assert shown_json({"a": [10 ** 1200, 5, True], "b": "x"}) == {
        "a": ["~1.000e1200", 5, True], "b": "x"}


def test_a_lower_python_limit_on_digits_is_kept(monkeypatch):
    # PYTHONINTMAXSTRDIGITS may lower Python's limit to 640 digits: rounded from there
    monkeypatch.setattr(sys, "get_int_max_str_digits", lambda: 640)
    assert integer_text(10 ** 700) == "~1.000e700"
    assert integer_text(10 ** 600) == str(10 ** 600)


# -- weights

def test_a_bfloat16_state_dict_is_refused_by_name():
    torch = pytest.importorskip("torch")
    state = torch.nn.MultiheadAttention(4, 2).to(torch.bfloat16).state_dict()
    # before: TypeError('Got unsupported ScalarType BFloat16') from Tensor.numpy
    with raises(WeightsError, "nn.MultiheadAttention: entry 'in_proj_weight' has dtype "
                              "torch.bfloat16, which NumPy has no type for; convert the state "
                              "dict first, e.g. model.float().state_dict()"):
        checkpoints.from_torch_multi_head_attention(state)


def test_from_llama_refuses_bfloat16_by_name():
    torch = pytest.importorskip("torch")
    state = {"model.embed_tokens.weight": torch.zeros(4, 2, dtype=torch.bfloat16)}
    with raises(WeightsError, "Llama: entry 'model.embed_tokens.weight' has dtype "
                              "torch.bfloat16, which NumPy has no type for; convert the state "
                              "dict first, e.g. model.float().state_dict()"):
        checkpoints.from_llama(state)


def test_float128_weights_are_refused_by_name(tmp_path):
    # before: accepted, then a TypeError from erf in the generated code
    path = tmp_path / "w.npz"
    np.savez(path, E=np.zeros((2, 3), np.longdouble))
    with raises(WeightsError, f"{path}: parameter E has dtype float128, which the generated "
                              "code does not compute in; parameters are float16, float32 or "
                              "float64"):
        weights.load(path, {"E": (2, 3)})


# -- docs

def test_docs_of_a_spec_without_batch_and_positions_leave_per_token_figures_out(capsys,
                                                                                 tmp_path):
    # before: KeyError: 'T' (spec/docs/site.py, the positions FLOPs are counted per)
    path = tmp_path / "plain.tspec"
    path.write_text('spec plain "no B, no T"\ndim n "rows"\ndim d "width"\ninput X "n d" "x"\n'
                    'param W "d d" "w"\nY "n d" "y" = X @ W\noutput Y\n')
    code, _, err = run(capsys, "docs", str(path), "--set", "n=3", "--set", "d=4", "--out",
                       str(tmp_path / "docs"))
    assert (code, err) == (0, "")
    page = (tmp_path / "docs" / "plain+n=3+d=4.md").read_text(encoding="utf-8")
    assert "| matrix products | $2 d^{2} n$ | 96 | — |" in page


GRID = ["check", "base", "--grid", "H=1:64:1", "--grid", "d_model=64:4096:64"]  # ~435 KB


@pytest.mark.parametrize("unbuffered", [False, True])
def test_a_reader_that_goes_away_mid_output_ends_the_command_with_141(unbuffered):
    # before: with PYTHONUNBUFFERED the grid went out in one write to the file itself, which
    # took the part the reader had room for; the text layer dropped the rest without a word
    # and the command exited 1 (some combinations invalid), its output cut short
    reader, writer = os.pipe()
    try:
        process = tspec_process(GRID, writer, unbuffered)
    finally:
        os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        assert len(pipe.read(100)) == 100
    _, err = process.communicate(timeout=300)
    assert (process.returncode, err) == (141, b"")


def test_unbuffered_output_arrives_whole():
    written = {}
    for unbuffered in (False, True):
        process = tspec_process(GRID, subprocess.PIPE, unbuffered)
        out, err = process.communicate(timeout=300)
        assert (process.returncode, err) == (1, b"")
        written[unbuffered] = out
    assert len(written[True]) > 400_000
    assert written[True] == written[False]
