"""Every command's work grows linearly (or as n log n) with the spec's size: counted in
function calls (deterministic, unlike time) at two sizes ten times apart, for specs whose every
layer has its own width (every count a sum of distinct terms, every variant hundreds of dims:
where the quadratic work was). benchmarks/command_growth.py times the same up to 10^5 tensors.
"""

import contextlib
import cProfile
import importlib.util
import io
import pstats

import pytest
from support.command_line import ROOT
from sympy.core.cache import clear_cache

from tspec import cli, shipped
from tspec.analysis.diff import _union

_found = importlib.util.spec_from_file_location("command_growth",
                                                ROOT / "benchmarks" / "command_growth.py")
growth = importlib.util.module_from_spec(_found)
_found.loader.exec_module(growth)

SMALL, LARGE = 50, 500
# calls at LARGE over calls at SMALL: 10 for linear work (less, with fixed costs), 100 for
# quadratic; before the fixes, shapes 24, docs 20, run 43, grid 76, diff 87
LIMIT = (LARGE / SMALL) ** 1.2


def calls(arguments: list[str]) -> int:
    """Function calls (Python and built-in) a command makes, from cold caches."""
    shipped._parse_cached.cache_clear()
    clear_cache()
    profile = cProfile.Profile()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        profile.enable()
        try:
            code = cli.main(arguments)
        finally:
            profile.disable()
    assert code in (0, 1), arguments
    return pstats.Stats(profile).total_calls


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("command", ["check", "shapes", "diff", "docs", "grid", "run"])
def test_every_command_grows_linearly_with_the_spec(tmp_path, command):
    small, large = (calls(growth.argv(command, growth.write_case(tmp_path, "widths", n),
                                      str(tmp_path / "out"))) for n in (SMALL, LARGE))
    assert large / small <= LIMIT, (small, large)


class Counted(list):
    """A list that counts how often it is read through."""

    reads = 0

    def __iter__(self):
        Counted.reads += 1
        return super().__iter__()


def test_a_diffs_union_reads_each_side_once():
    # before: the first side was made a set again for every item of the second (quadratic:
    # 4.8 s of 8 s for a diff of 1,000 block calls); its calls are built-ins, which the call
    # counts above cannot see
    first = Counted(range(1000))
    assert _union(first, list(range(500, 1500))) == list(range(1500))
    assert Counted.reads == 1


def constraints_case(folder, n: int) -> list[str]:
    """A variant that breaks each of n constraints, each over its own dim and one they share:
    a finding and a hint (valid values near, for both dims) each."""
    lines = ['dim B "b"'] + [f'dim d{i} "d"\nrequire d{i} % B == 0' for i in range(n)]
    lines += ['input X "B d0" "x"', 'Y "B d0" = relu(X)', "output Y"]
    (folder / f"k{n}.tspec").write_text("\n".join(lines) + "\n")
    dims = "".join(f"d{i} = 3\n" for i in range(n))
    (folder / f"k{n}.toml").write_text(f'spec = "k{n}.tspec"\n[dims]\nB = 2\n{dims}')
    return ["check", str(folder / f"k{n}.toml")]


def lets_case(folder, n: int) -> list[str]:
    """A chain of n derived dims, each from the one before, given values."""
    lines = ['dim B "b"', 'dim a0 "a"'] + [f'dim a{i} "a"\nlet a{i} = a{i - 1} + 1'
                                           for i in range(1, n)]
    lines += [f'input X "B a{n - 1}" "x"', f'Y "B a{n - 1}" = relu(X)', "output Y"]
    (folder / f"l{n}.tspec").write_text("\n".join(lines) + "\n")
    (folder / f"l{n}.toml").write_text(f'spec = "l{n}.tspec"\n[dims]\nB = 2\na0 = 3\n')
    return ["shapes", str(folder / f"l{n}.toml")]


@pytest.mark.slow
@pytest.mark.parametrize("case", [constraints_case, lets_case])
def test_many_constraints_broken_and_many_derived_dims_cost_linear_work(tmp_path, case):
    # before: each broken constraint's hint judged every constraint for every value it tried,
    # and derived dims were put into each other all at once until nothing changed: a pass a
    # link of the chain
    small, large = (calls(case(tmp_path, n)) for n in (SMALL, LARGE))
    assert large / small <= LIMIT, (small, large)
