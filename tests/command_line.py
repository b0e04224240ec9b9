"""Running the `tspec` command line inside a test: exit status and what it printed."""

from pathlib import Path

from tspec import cli

ROOT = Path(__file__).resolve().parent.parent       # the checkout: paths print relative to it


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
