"""The `tspec` command (also `python -m tspec`): tspec.cli.main, reached through a module that
imports nothing heavy. Importing tspec takes about a second (sympy, NumPy); Ctrl-C during it
ends like Ctrl-C anywhere else in a command: one line on stderr and exit status 130, instead of
Python's traceback of the import it stopped."""

import sys

EXIT_INTERRUPTED = 130        # as tspec.cli's: 128 + SIGINT


def main() -> int:
    try:
        from tspec.cli import main as command
    except KeyboardInterrupt:
        print("tspec: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return command()


if __name__ == "__main__":
    sys.exit(main())
