"""Every command bounded: each stops at its time limit, naming where it was, and a grid is
judged, counted and written a chunk of combinations at a time (memory for one chunk, the same
output as all at once)."""

import importlib
import io
import math
from fractions import Fraction
from types import SimpleNamespace

import pytest
import sympy
from support.specs import builtin_line

import tspec
from tspec import cli
from tspec.analysis.evaluate import Evaluator
from tspec.checking import limits

# lines of the built-in spec, found by their text
HEADS = builtin_line("require d_model % H == 0")

grid_module = importlib.import_module("tspec.analysis.grid")     # tspec.grid is also api.grid

TINY = [a for setting in ("N=1", "d_model=8", "H=2", "d_ff=4", "V=11", "T=3", "T_dec=3")
        for a in ("--set", setting)]
RETRY = "; give it longer with --time-limit SECONDS\n"


pytestmark = pytest.mark.usefixtures("in_checkout")     # paths print relative to the checkout


@pytest.fixture
def clock(monkeypatch):
    """The limits' clock, which jumps past every deadline when the phase ``clock.at`` begins
    (the real alarm is 60 s away: the clock is what each phase consults)."""
    state = SimpleNamespace(now=0.0, at=None)
    monkeypatch.setattr(limits, "time", SimpleNamespace(monotonic=lambda: state.now))
    doing = limits.doing

    def jumping(phase, file=None):
        if phase == state.at:
            state.now = 1e9
        doing(phase, file)
    monkeypatch.setattr(limits, "doing", jumping)
    return state


@pytest.mark.parametrize("argv, phase", [
    (["shapes", "base"], "listing the shapes of base"),
    (["diff", "gpt2_small", "gpt2_medium"], "comparing gpt2_small with gpt2_medium"),
    (["diff", "gpt2_small", "gpt2_medium"],
     "counting gpt2_medium's parameters, FLOPs and memory"),
    (["docs", "base", "--out", "{tmp}"], "making the documentation of base"),
    (["check", "base", "--grid", "H=1:8:1"], "judging the combinations of the grid of base"),
    (["check", "base", "--grid", "H=1:8:1", "--format", "json"],
     "judging the combinations of the grid of base"),
    (["run", "base", *TINY, "--time-limit", "60"], "running the forward pass of base"),
    (["run", "base", *TINY, "--time-limit", "60"], "generating the forward code of base"),
])
def test_every_command_stops_at_its_time_limit_naming_its_phase(clock, capsys, tmp_path,
                                                                argv, phase):
    # before: only the proof was bounded; a diff, docs, a grid or a run past it went on
    clock.at = phase
    assert cli.main([a.format(tmp=tmp_path) for a in argv]) == 2
    command = argv[0]
    assert capsys.readouterr().err == (f"tspec: error: tspec {command} stopped at its time "
                                       f"limit of 60 s, {phase}{RETRY}")


def test_run_stops_at_the_default_time_limit_as_check_does(clock, capsys):
    # before: run had no time limit unless given one (issue 32)
    clock.at = "running the forward pass of base"
    assert cli.main(["run", "base", *TINY]) == 2
    assert capsys.readouterr().err == ("tspec: error: tspec run stopped at its time limit of "
                                       f"60 s, running the forward pass of base{RETRY}")


def test_the_time_limit_is_the_commands_own_option(capsys):
    for command in ("check", "shapes", "diff", "docs", "run", "generate", "import"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        assert "--time-limit SECONDS" in capsys.readouterr().out


def test_a_grid_past_its_time_limit_stops_as_it_writes(capsys):
    # a million combinations as JSON take about 20 s here: the alarm stops them after one
    assert cli.main(["check", "base", "--grid", "d_model=1:1000000:1", "--format", "json",
                     "--time-limit", "3"]) == 2
    out, err = capsys.readouterr()
    assert err == ("tspec: error: tspec check stopped at its time limit of 3 s, judging the "
                   f"combinations of the grid of base{RETRY}")
    assert out.startswith('{\n  "target": "base",\n')          # what it had written


# -- grids, a chunk at a time

class Recording(io.StringIO):
    """A standard output that remembers how much had been written when each chunk of
    combinations was judged."""

    def __init__(self):
        super().__init__()
        self.at_chunks: list[tuple[int, int]] = []      # (combinations, characters written)


@pytest.mark.parametrize("format", ["text", "csv", "json"])
def test_a_grid_is_written_as_it_is_judged(monkeypatch, format):
    # before: every combination was judged and counted, and held, before a line was written
    # (--grid d_model=1:1000000:1 --format json: 5 GB)
    out = Recording()
    judge = grid_module._judge

    def recording(grid, start, stop, counted):
        out.at_chunks.append((stop - start, len(out.getvalue())))
        return judge(grid, start, stop, counted)
    monkeypatch.setattr(grid_module, "CHUNK", 100)
    monkeypatch.setattr(grid_module, "_judge", recording)
    monkeypatch.setattr("sys.stdout", out)
    assert cli.main(["check", "base", "--grid", "d_model=1:1000:1", "--format", format]) == 1
    assert max(size for size, _ in out.at_chunks) == 100
    # when the last chunk was judged, the rows of all the others were out: 900 lines at least
    last = out.at_chunks[-1][1]
    assert 0 < last < len(out.getvalue())
    assert out.getvalue()[:last].count("\n") >= 900


HUGE = ('dim B "batch"\ndim T "length"\ndim d "width"\ndim k "huge"\nlet k = d**64 * d**64 * '
        'd**64\ninput X "B T d" "x"\nparam W "d k" "w"\nparam W2 "k d" "w2"\n'
        'Y "B T d" "y" = X @ W @ W2\noutput Y\n')
ZERO = ('dim B "b"\ndim d "d"\ndim H "h"\ndim k "k"\nlet k = d / (H - 1)\n'
        'require d % (H - 1) == 0\ninput X "B d" "x"\nparam W "d k"\nY "B k" = X @ W\n'
        'output Y\n')


@pytest.mark.slow
@pytest.mark.parametrize("grid", [
    ["base", "--grid", "d_model=100:300:7", "--grid", "H=1:9:2", "--set", "V=100"],
    ["gpt2_small", "--grid", "max_len=1:300:3"],
    ["{tmp}/huge.tspec", "--grid", f"d=1,2,{'9' * 40}"],
    ["{tmp}/zero.tspec", "--grid", "H=1:5:1", "--grid", "d=2:6:1", "--set", "B=3"],
    ["base", "--grid", "d_model=4611686018427387900:4611686018427387910:1", "--grid",
     "H=1,2,3"],
])
def test_a_grid_in_chunks_is_what_it_is_all_at_once(monkeypatch, capsys, tmp_path, grid):
    (tmp_path / "huge.tspec").write_text(HUGE)
    (tmp_path / "zero.tspec").write_text(ZERO)
    argv = ["check"] + [a.format(tmp=tmp_path) for a in grid]
    outputs = {}
    for chunk in (1, 7, 10 ** 6):
        monkeypatch.setattr(grid_module, "CHUNK", chunk)
        for format in ("text", "csv", "json"):
            for only in ([], ["--only", "valid"], ["--only", "invalid"]):
                code = cli.main(argv + ["--format", format] + only)
                outputs.setdefault((format, *only), set()).add((code, *capsys.readouterr()))
    assert all(len(seen) == 1 for seen in outputs.values())


def test_the_shapes_of_a_spec_without_tensors_are_an_empty_table(tmp_path, capsys):
    # found by the fuzzer's shapes target: max() of one width was a TypeError (exit 70)
    (tmp_path / "n.tspec").write_text('dim n "count" = 3\ndim m "more"\nlet m = 2*n + 1\n')
    assert cli.main(["shapes", str(tmp_path / "n.tspec")]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "tensor  role  dtype  symbolic shape  concrete shape",
        "------  ----  -----  --------------  --------------"]


# -- found by the fuzzer's targets for the commands past the proof (a regression test each)

def test_a_grid_over_a_fixed_dim_past_int64_divides_exactly(capsys):
    # grid:901 (seed 3): NumPy made d_model / H (0-d arrays of Python integers) a bare int,
    # and np.gcd of one past int64 an OverflowError (exit 70)
    assert cli.main(["check", "base", "--set", f"d_model={'9' * 40}", "--grid", "V=1,2",
                     "--grid", "B=64,66", "--format", "csv"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"1,64,false,,,,require d_model % H == 0 (spec/transformer.tspec:{HEADS})"
    assert len(out) == 5


def test_the_docs_of_a_spec_the_checker_refuses_are_its_error(tmp_path, capsys):
    # docs:76 (seed 3): the counts ran before the checker, a KeyError for a tensor declared
    # but never computed (exit 70)
    (tmp_path / "x.tspec").write_text('dim B "b"\ndim d "d"\ntensor X "B d"\n'
                                      'Y "B d" = -X\noutput Y\n')
    assert cli.main(["docs", str(tmp_path / "x.tspec"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"tspec: error: {tmp_path}/x.tspec:3: tensor X is "
                                       "declared but never computed in the model\n")


@pytest.mark.parametrize("values", [(10 ** 40 - 1, 7, 2), (3, 10 ** 40 - 1, 10 ** 40 - 1),
                                    (-(10 ** 40 - 1), 10 ** 40 - 1, 2)])
def test_the_grid_evaluator_is_exact_on_single_integers_past_int64(values):
    # grid:1549 (seed 4): np.gcd of two 0-d arrays of Python integers is a bare integer,
    # which np.where could not make int64 (OverflowError); every result an array now
    a, b, c = sympy.symbols("a b c", integer=True)
    A, B, C = (Fraction(v) for v in values)
    expected = {a / b: A / B, sympy.Mod(a, b): A % B, sympy.floor(a / b): math.floor(A / B),
                sympy.ceiling(a / b): math.ceil(A / B), a * b / c: A * B / C,
                (a + b) / c: (A + B) / C, a ** 3 / b ** 2: A ** 3 / B ** 2,
                sympy.Mod(a / b, c): (A / B) % C, a - b: A - B}
    evaluator = Evaluator(dict(zip((a, b, c), values)))
    for expr, value in expected.items():
        found = evaluator.value(expr)
        assert found.num.ndim == found.den.ndim == 0
        assert Fraction(int(found.num), int(found.den)) == value, expr


def test_a_parameter_of_unstated_shape_nothing_uses_is_shown_as_unknown(tmp_path, capsys):
    # diff:156 (seed 5): the dims the counts use were read off every shape, a parameter's
    # unstated one (None) too: an AttributeError in shapes, diff and docs (exit 70)
    (tmp_path / "u.tspec").write_text('dim B "b"\ndim d "d"\ninput X "B d" "x"\n'
                                      'param g ? "a gain nothing uses"\nY "B d" = -X\n'
                                      'output Y\n')
    (tmp_path / "u.toml").write_text('spec = "u.tspec"\n[dims]\nB = 2\nd = 3\n')
    assert cli.main(["shapes", str(tmp_path / "u.toml")]) == 1      # the unstated shape
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "g       param   float  ?               ?"
    assert cli.main(["diff", str(tmp_path / "u.toml"), str(tmp_path / "u.toml")]) == 2
    assert capsys.readouterr().err == (
        "tspec: error: 1 finding in u and 1 finding in u: nothing compared (the first: "
        f"{tmp_path / 'u.tspec'}:4: unstated-shape: parameter g has no stated shape, and "
        "nothing uses it to tell one)\n")


def test_a_command_runs_with_the_collectors_thresholds_and_restores_them(monkeypatch):
    # the cycle collector walked the objects a command keeps again and again: with Python's
    # thresholds the docs of 98,304 tensors took 8.7 s, with these 5.4 s (benchmarks/RESULTS.md)
    import gc
    seen = []
    monkeypatch.setattr(cli, "_list", lambda: seen.append(gc.get_threshold()) or 0)
    before = gc.get_threshold()
    assert cli.main(["list"]) == 0
    assert seen == [cli.COLLECTOR_THRESHOLDS] and gc.get_threshold() == before


def test_a_trace_of_many_names_is_recorded_in_calls_of_at_most_256_keywords():
    # one trace.update (now rt.record) of 25,000 keywords took CPython's compiler 5 s (it
    # compares a call's keywords pairwise): `tspec run` of a 25,000-equation chain grew as
    # n^1.3, not linearly
    import numpy as np

    from tspec.codegen.rendering.steps import TRACE_KEYWORDS
    from tspec.execution.loading import load_source
    n = 600
    text = ('dim B "batch"\ndim d "width"\ninput X0 "B d" "x"\n'
            + "".join(f'X{i + 1} "B d" "x{i + 1}" = X{i} + X{i}\n' for i in range(n))
            + f"output X{n}\n")
    code = tspec.source(tspec.parse(text, "chain.tspec"))
    calls = [line for line in code.splitlines() if "rt.record(trace, " in line]
    assert TRACE_KEYWORDS == 256 and len(calls) == 3     # 256 + 256 + 88 names
    module = load_source(code)
    x = np.full((2, 3), 1.0)
    trace: dict = {}
    out = module.chain(x, trace=trace)
    assert sorted(trace, key=lambda name: int(name[1:])) == [f"X{i}" for i in range(1, n + 1)]
    assert all(np.array_equal(trace[f"X{i}"], x * 2.0 ** i) for i in (1, 256, 257, 600))
    assert np.array_equal(out, x * 2.0 ** n)
