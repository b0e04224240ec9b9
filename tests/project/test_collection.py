"""Collecting the tests is cheap: it checks and lowers nothing (a module that lowered the
built-in spec's models to parametrize its tests cost every run, on every worker, seconds
before a test ran), and tests/language does not import PyTorch or transformers."""

import subprocess
import sys
import textwrap

import pytest
from support.command_line import ROOT

# collects the named test folders in this process, every check and lowering counted
COLLECT = textwrap.dedent("""\
    import sys

    import pytest

    from tspec.checking import check
    from tspec.codegen.lowering import lower

    calls = {"check": 0, "lower": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    check._check = counted("check", check._check)
    lower._lowered = counted("lower", lower._lowered)
    code = pytest.main(["--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                        *sys.argv[1:]])
    print("calls", calls["check"], calls["lower"])
    print("imported", *sorted({"torch", "transformers"} & set(sys.modules)))
    sys.exit(code)
""")


def collected(*folders: str) -> tuple[tuple[int, int], list[str]]:
    """Collect ``folders`` in a fresh interpreter: the checks and lowerings it made, and which
    of torch and transformers it imported."""
    process = subprocess.run([sys.executable, "-c", COLLECT, *folders], cwd=ROOT,
                             capture_output=True, text=True, timeout=300, check=False)
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]
    lines = process.stdout.splitlines()
    counts = next(line for line in lines if line.startswith("calls ")).split()[1:]
    imported = next(line for line in lines if line.startswith("imported")).split()[1:]
    return (int(counts[0]), int(counts[1])), imported


@pytest.mark.slow
def test_collecting_every_test_checks_and_lowers_nothing():
    (checks, lowerings), _ = collected("tests")
    assert (checks, lowerings) == (0, 0)


def test_collecting_the_language_tests_imports_neither_torch_nor_transformers():
    counts, imported = collected("tests/language")
    assert (counts, imported) == ((0, 0), [])
