"""The `tspec` command line.

    tspec check [SPEC_OR_VARIANT ...] [--set NAME=VALUE ...] [--format text|json]
                [--time-limit SECONDS]
    tspec check SPEC_OR_VARIANT --grid NAME=VALUES ... [--set ...] [--only valid|invalid]
                [--format text|json|csv] [--time-limit SECONDS]
    tspec diff VARIANT_A VARIANT_B [--set NAME=VALUE ...] [--format text|json]
               [--time-limit SECONDS]
    tspec shapes VARIANT [--set NAME=VALUE ...] [--format text|json] [--time-limit SECONDS]
    tspec list
    tspec import CONFIG [--out FILE] [--force] [--no-pooler] [--time-limit SECONDS]
    tspec audit [--check] [--out PATH] [--force]
    tspec docs [SPEC_OR_VARIANT ...] [--set ...] [--out DIR] [--format md|html|all] [--check]
               [--force] [--time-limit SECONDS]
    tspec generate [--backend numpy|cupy] [--out DIR] [--check] [--force]
                   [--time-limit SECONDS]
    tspec generate VARIANT_OR_SPEC [--backend numpy|cupy] [--out DIR] [--check] [--force]
                   [--time-limit SECONDS]
    tspec run VARIANT [--set NAME=VALUE ...] [--weights PATH] [--backend numpy] [--seed N]
              [--typecheck] [--decode STEPS] [--max-memory SIZE] [--time-limit SECONDS]
    tspec --version

`python -m tspec` is the same command. Every command that reads a user's files (check, diff,
shapes, docs, generate, import and run) stops at its time limit (--time-limit, default 60 s:
the whole command, its proofs and the rest) with a one-line error naming where it was, exit 2;
audit and list, which read only tspec's own files, take none.

What a command writes (generate, docs, audit, import --out) it writes whole or not at all,
and over a file only where tspec wrote it (the file begins with tspec's header): any other,
and a symbolic link, is refused unless --force is given (which replaces the link itself,
never its target); a named pipe or a device is refused even so (spec/files.py,
``write_outputs``). A user's variant or spec is written to the working directory unless --out
says otherwise; only tspec's own go to the checkout's generated/ and docs/variants/.

Exit status: 0 when everything is proved, 1 when there are findings (or, for `audit --check`,
a stale report; for a grid, an invalid combination; for `diff`, a difference; for `run`, an
error the generated code raised as it ran), 2 on bad usage, unreadable input or a file or
output that cannot be written (with a one-line error, never a traceback), 130 when stopped by
Ctrl-C, 141 when the reader of the output went away (`tspec check | head`).
"""

import argparse
import gc
import linecache
import os
import re
import select
import sys
import traceback
import warnings
from pathlib import Path

from tspec import __version__, api
from tspec.analysis import counts
from tspec.analysis.grid import MAX_COMBINATIONS, parse_axis
from tspec.checking import limits
from tspec.checking.findings import (
    KINDS,
    display_path,
    findings_data,
    findings_text,
    summary,
    to_json,
)
from tspec.checking.report import require_proved
from tspec.errors import FindingsError, GridError, TspecError, UsageError, hidden
from tspec.files import HEADERS, write_outputs
from tspec.language.model import choices_in_force
from tspec.language.model import lets as derived_dims

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130     # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141     # 128 + SIGPIPE, as a shell reports `yes | head`
EXIT_INTERNAL = 70         # EX_SOFTWARE: a defect of tspec's own, never of the input
COLLECTOR_THRESHOLDS = (100_000, 50, 100)     # gc.set_threshold while a command runs
TIME_LIMITS = (f"check, diff, shapes, docs, generate, import and run, which read a user's "
               f"files, stop at --time-limit (default {limits.TIME_LIMIT:g} s) with an error, "
               "exit 2; audit and list, which read only tspec's own, take none.")


def _one_line(message: str) -> str:
    """An error as one line: any line break or other control character in it (a user's
    argument or path, quoted as given) shown as its escape."""
    return "".join(ascii(c)[1:-1] if hidden(c) else c for c in message)


class _Parser(argparse.ArgumentParser):
    def error(self, message):            # argparse's own usage errors: exit 2, no traceback
        self.print_usage(sys.stderr)
        print(f"tspec: error: {_one_line(message)}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tspec", description="A symbolic, shape-checked Transformer spec.",
                     epilog=TIME_LIMITS)
    parser.add_argument("--version", action="version", version=f"tspec {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    check = commands.add_parser(
        "check", help="prove a spec's shapes; check variants, or a grid of them",
        epilog="Exit status: 0 when everything is proved (with --grid: every combination is "
               "valid), 1 when there are findings (with --grid: some combination is invalid, "
               "or the proof has findings), 2 on bad usage.")
    check.add_argument("targets", nargs="*", metavar="SPEC_OR_VARIANT",
                       help="built-in names (tspec list) or .tspec/.toml paths; "
                            "default: the built-in transformer, every choice")
    _settings(check)
    check.add_argument("--grid", action="append", default=[], metavar="NAME=VALUES",
                       help="vary a dim: NAME=START:STOP:STEP (STOP included), NAME=A,B,C or "
                            "NAME=VALUE (repeatable); the target (one) is proved once under "
                            "its choices, then every combination is judged against its "
                            "constraints and counted (parameters, FLOPs, activation memory), "
                            f"at most {MAX_COMBINATIONS:,} combinations; --set fixes a dim, "
                            "--grid varies it, not both")
    check.add_argument("--only", choices=("valid", "invalid"),
                       help="with --grid: list only the valid or the invalid combinations "
                            "(the summary still counts all)")
    check.add_argument("--format", choices=("text", "json", "csv"), default="text",
                       help="csv: with --grid only")
    _time_limit(check, "stop a proof or grid that takes longer, naming the statement or the "
                       "phase it reached")

    diff = commands.add_parser(
        "diff", help="what changes from one variant to another: choices, dims, settings, "
                     "shapes, and the parameters, FLOPs and activation memory of each block",
        epilog="Exit status: 0 when the two are the same model at the same sizes, 1 when "
               "they differ, 2 on bad usage (as diff(1)).")
    diff.add_argument("a", metavar="VARIANT_A")
    diff.add_argument("b", metavar="VARIANT_B")
    diff.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                      dest="settings", help="set a dim value or a choice on both sides "
                                            "(repeatable)")
    diff.add_argument("--format", choices=("text", "json"), default="text")
    _time_limit(diff, "stop a diff that takes longer")

    shapes = commands.add_parser("shapes", help="every tensor's symbolic and concrete shape")
    shapes.add_argument("target", metavar="VARIANT")
    _settings(shapes)
    shapes.add_argument("--format", choices=("text", "json"), default="text")
    _time_limit(shapes, "stop a listing that takes longer")

    commands.add_parser("list", help="the built-in specs and variants")

    generate = commands.add_parser(
        "generate", help="write the generated forward code: the built-in models, or one "
                         "variant's or spec's")
    generate.add_argument("target", nargs="?", metavar="VARIANT_OR_SPEC",
                          help="write this model alone: a built-in name or a .toml/.tspec "
                               "path, as DIR/NAME.py (NAME the variant's file stem, or the "
                               "spec's name) with DIR/_runtime.py and DIR/__init__.py; a "
                               "spec under its default choices")
    generate.add_argument("--backend", help="one array backend (numpy, cupy); default: all, "
                                            "or numpy for one model")
    generate.add_argument("--out", metavar="DIR", type=Path,
                          help="where the code goes (default: generated/ in the checkout; for "
                               "one model, the folder it goes in, default generated/BACKEND/)")
    generate.add_argument("--check", action="store_true",
                          help="exit 1 with a diff when the files on disk are stale")
    _force(generate)
    _time_limit(generate, "stop generating code that takes longer")

    run = commands.add_parser("run", help="run a variant's generated forward pass on random "
                                          "weights and tokens")
    run.add_argument("target", metavar="VARIANT")
    _settings(run)
    run.add_argument("--backend", default="numpy", help="array backend (numpy, cupy)")
    run.add_argument("--weights", metavar="PATH",
                     help="run with a checkpoint's weights: a .safetensors file or a folder "
                          "holding model.safetensors or model.safetensors.index.json (the "
                          "spec's names, or a Hugging Face family's by the variant's choices: "
                          "GPT-2, BERT, Llama, Mistral, Qwen2), or a .npz of the spec's names")
    run.add_argument("--seed", type=int, default=0, help="seed for weights and tokens")
    run.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    run.add_argument("--typecheck", action="store_true",
                     help="check every array's shape at run time (jaxtyping)")
    run.add_argument("--decode", type=int, metavar="STEPS",
                     help="then decode the last STEPS positions one at a time from a prefill "
                          "of the rest, against the full forward's logits")
    run.add_argument("--max-memory", metavar="SIZE",
                     help="refuse a variant whose parameters, inputs and activations would "
                          "take more than SIZE (bytes, or with K, M, G, T: powers of 1024); "
                          "default: the memory this process may use")
    _time_limit(run, "stop a run that takes longer")

    docs = commands.add_parser("docs", help="write each variant's documentation: dims, "
                                            "shapes, parameters, FLOPs, memory, diagrams")
    docs.add_argument("targets", nargs="*", metavar="SPEC_OR_VARIANT",
                      help="built-in names or .tspec/.toml paths; default: every shipped "
                           "variant, and the manual's op reference (docs/manual/ops.md)")
    _settings(docs)
    docs.add_argument("--out", metavar="DIR", type=Path,
                      help="where the pages go (default: docs/variants in the checkout for "
                           "tspec's own variants, the working directory for any other or "
                           "with --set)")
    docs.add_argument("--format", choices=("md", "html", "all"), default="all",
                      help="Markdown, HTML or both (default)")
    docs.add_argument("--check", action="store_true",
                      help="exit 1 with a diff when the pages on disk (and the op "
                           "reference, where it is written) are stale")
    _force(docs)
    _time_limit(docs, "stop making pages that takes longer")

    imports = commands.add_parser(
        "import", help="a Hugging Face config.json as a variant: its choices, dims and "
                       "settings", epilog="Exit status: 0 when imported, 2 when the config "
                                          "cannot be read or has a field tspec does not "
                                          "support (named, with its value).")
    imports.add_argument("config", metavar="CONFIG",
                         help="a config.json, or a folder holding one")
    imports.add_argument("--out", metavar="FILE", type=Path,
                         help="write the variant TOML there (default: standard output)")
    _force(imports)
    imports.add_argument("--no-pooler", action="store_true",
                         help="BERT: a BertModel built without its pooler "
                              "(add_pooling_layer=False)")
    _time_limit(imports, "stop an import that takes longer")

    audit = commands.add_parser("audit", help="check the seed transcriptions and write "
                                              "docs/seed-audit.md")
    audit.add_argument("--check", action="store_true",
                       help="exit 1 with a diff when the committed report is stale")
    audit.add_argument("--out", metavar="PATH", type=Path,
                       help="where the report goes (default: docs/seed-audit.md in the "
                            "checkout)")
    _force(audit)
    return parser


def _force(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true",
                        help="replace a file that tspec did not write (one without its "
                             "header), or a symbolic link (the link itself, not its target)")


def _time_limit(parser: argparse.ArgumentParser, what: str,
                default: float | None = limits.TIME_LIMIT) -> None:
    shown = f"default {default:g}" if default is not None else "default: none"
    parser.add_argument("--time-limit", type=float, default=default, metavar="SECONDS",
                        help=f"{what} ({shown}), with an error and exit 2")


def _settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        dest="settings", help="set a dim value or a choice (repeatable)")


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit status (argparse's own exits, --help and usage
    errors, raise SystemExit as usual). Every outcome of every command is turned into the
    status and at most one line on stderr here, and the output is flushed here, so that what
    goes wrong writing it (the reader went away, a full device) is handled once for all."""
    output = _Output(sys.stdout)
    sys.stdout = output
    # a command builds hundreds of thousands of objects that live to its end; with Python's
    # default thresholds (700, 10, 10) the cycle collector walks them again and again, which
    # made a command's time grow faster than its work (the docs of 98,304 tensors: 8.7 s,
    # 5.4 s with these; benchmarks/RESULTS.md)
    thresholds = gc.get_threshold()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    shown = warnings.showwarning
    warnings.showwarning = _Warnings().show
    try:
        try:
            code = _command(argv)
        except SystemExit as stop:          # argparse: after --help or a usage error
            code = _flushed(output, stop.code)
            raise SystemExit(code) from None
        except BaseException as error:      # noqa: BLE001 (each kind is judged in _failure)
            code = _failure(error, output)
        return _flushed(output, code)
    finally:
        sys.stdout = output.stream
        gc.set_threshold(*thresholds)
        warnings.showwarning = shown


class _Warnings:
    """How a warning raised while a command runs is said (Python's own way takes two lines,
    the second the source line): once for each message, in one line on stderr, with where it
    was: the statement of the generated code (a NumPy overflow in a model's forward pass, whose
    outputs then hold inf or NaN), else the file and line. The filters in force still decide
    which are shown."""

    def __init__(self):
        self.said: set[tuple[type, str]] = set()

    def show(self, message, category, filename, lineno, file=None, line=None) -> None:
        text = _one_line(str(message))
        if (category, text) in self.said:       # each overflow of a chain of equations: once
            return
        self.said.add((category, text))
        if linecache.getline(filename, 1) == HEADERS[".py"]:   # code tspec generated
            code = (line if line is not None else linecache.getline(filename, lineno)).strip()
            where = f"in the generated code at {_one_line(code)}" if code else \
                "in the generated code"
        else:
            where = f"at {Path(filename).name}:{lineno}"
        _say(f"tspec: warning: {category.__name__}: {text}, {where}")


def _command(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        return _list()
    command = {"check": _check, "shapes": _shapes, "diff": _diff, "audit": _audit,
               "generate": _generate, "run": _run, "docs": _docs,
               "import": _import}[args.command]
    seconds = getattr(args, "time_limit", None)
    if seconds is None:                   # audit: tspec's own files alone
        return command(args)
    # the whole command: reading, checking, and the rest
    with limits.time_limit(seconds, f"tspec {args.command}", "reading its input"):
        return command(args)


class _OutputFailed(Exception):
    """Writing standard output failed (the OSError is its cause): not a file the command
    writes, whose errors name their path."""


class _Output:
    """Standard output while a command runs: a failed write raises _OutputFailed, and text the
    stream cannot encode (an em dash on an ASCII or Latin-1 terminal) is written with
    backslash escapes (\\u2014), as Python writes it to stderr, instead of failing."""

    def __init__(self, stream):
        self.stream = stream          # None where the process started with stdout closed
        self.abandoned = False        # after a failure: nothing more is written

    def write(self, text: str) -> int:
        if self.stream is None or self.abandoned:
            return len(text)
        try:
            binary = getattr(self.stream, "buffer", None)
            if binary is None:          # an in-memory stream
                return self.stream.write(text)
            # through the bytes below the text layer, every byte: with PYTHONUNBUFFERED
            # that is the file itself, whose write may take only part (a reader that goes
            # away mid-way), and the text layer drops the rest without a word
            encoding = self.stream.encoding
            try:
                data = text.encode(encoding, self.stream.errors or "strict")
            except UnicodeEncodeError:
                data = text.encode(encoding, "backslashreplace")
            self.stream.flush()         # what the text layer still holds goes first
            view = memoryview(data)
            while view:
                written = binary.write(view)
                if written is None:     # a non-blocking file that is full: wait for room
                    select.select([], [binary], [])
                    continue
                view = view[written:]
            if self.stream.write_through or self.stream.line_buffering:
                binary.flush()
            return len(text)
        except OSError as error:
            raise _OutputFailed() from error

    def flush(self) -> None:
        if self.stream is None or self.abandoned:
            return
        try:
            self.stream.flush()
        except OSError as error:
            raise _OutputFailed() from error

    def abandon(self) -> None:
        """Point the stream's file at /dev/null, as Python's documentation advises after a
        broken pipe: what is still buffered goes nowhere, and the interpreter's own flush at
        exit cannot fail again ("Exception ignored ... BrokenPipeError", exit 120)."""
        self.abandoned = True
        try:
            descriptor = self.stream.fileno()
        except (AttributeError, OSError, ValueError):   # no file: an in-memory stream
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, descriptor)
        os.close(devnull)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _flushed(output: _Output, code):
    """``code`` once the output is written out; 141 when its reader went away, 2 when it
    cannot be written (a full device)."""
    try:
        output.flush()
        return code
    except _OutputFailed as failed:
        return _failure(failed, output)
    except KeyboardInterrupt as error:
        return _failure(error, output)


def _failure(error: BaseException, output: _Output) -> int:
    """The exit status of a command that raised ``error``, its one line said on stderr."""
    if isinstance(error, _OutputFailed):
        output.abandon()
        if isinstance(error.__cause__, BrokenPipeError):
            return EXIT_BROKEN_PIPE           # the reader went away (tspec check | head)
        return _error(f"cannot write the output: {_reason(error.__cause__)}")
    if isinstance(error, KeyboardInterrupt):
        try:
            output.flush()
        except _OutputFailed:
            output.abandon()
        _say("tspec: interrupted")
        return EXIT_INTERRUPTED
    if isinstance(error, FindingsError) and error.exit_status != EXIT_USAGE:
        # the findings as `tspec check` lists them, then what the command did not do (where
        # findings exit 2, as diff's, whose 1 says the two differ: the one error line, the
        # first named in it)
        for text in findings_text(error.findings):
            _say(text)
        _say(f"tspec: {_one_line(error.message)}")
        return error.exit_status
    if isinstance(error, TspecError):
        if error.file:
            error.file = display_path(error.file)
        return _error(str(error), error.exit_status)
    if isinstance(error, RecursionError):
        return _error("the spec nests too deeply to check")
    if isinstance(error, OSError):            # one no command turned into ours
        where = f"{display_path(str(error.filename))}: " if error.filename is not None else ""
        return _error(f"{where}{_reason(error)}")
    if isinstance(error, MemoryError):
        return _error(f"out of memory{': ' if str(error) else ''}{error}")
    if not isinstance(error, Exception) or os.environ.get("TSPEC_TRACEBACK"):
        raise error                           # SystemExit and the like; or asked to
    # a defect of tspec's own: one line still, saying so (TSPEC_TRACEBACK=1 shows where)
    frames = traceback.extract_tb(error.__traceback__)
    where = f"at {Path(frames[-1].filename).name}:{frames[-1].lineno}; " if frames else ""
    _say(f"tspec: internal error: {type(error).__name__}: {_one_line(str(error))} ({where}"
         "please report it; TSPEC_TRACEBACK=1 shows the traceback)")
    return EXIT_INTERNAL


def _reason(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__


def _error(message: str, code: int = EXIT_USAGE) -> int:
    _say(f"tspec: error: {_one_line(message)}")
    return code


def _say(line: str) -> None:
    """One line on stderr; where stderr itself cannot be written, nothing more can be said."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _check(args) -> int:
    if args.grid:
        return _grid(args)
    if args.format == "csv":
        raise UsageError("--format csv is for grids: give --grid NAME=VALUES")
    if args.only:
        raise UsageError("--only is for grids: give --grid NAME=VALUES")
    targets = args.targets or ["transformer"]
    reports = [api.check(api.load(target, args.settings)) for target in targets]
    if args.format == "json":
        print(to_json([_report_json(r) for r in reports]))
    else:
        for report in reports:
            print(_report_text(report))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FINDINGS


def _grid(args) -> int:
    targets = args.targets or ["transformer"]
    if len(targets) != 1:
        raise GridError(f"--grid checks one spec or variant at a time; got {len(targets)}: "
                        f"{', '.join(targets)}")
    axes = [parse_axis(text) for text in args.grid]
    grid = api.grid(targets[0], axes, args.settings)
    if not grid.proved:
        require_proved(grid.variant, "no combination judged", grid.proof)
    parts = {"json": grid.json_parts, "csv": grid.csv_parts, "text": grid.text_parts}
    for part in parts[args.format](args.only):        # written as the rows are made
        sys.stdout.write(part)
    return EXIT_OK if grid.invalid_count == 0 else EXIT_FINDINGS


def _diff(args) -> int:
    diff = api.diff(args.a, args.b, args.settings)
    if args.format == "json":
        print(to_json(diff.as_dict()))
    else:
        sys.stdout.write(diff.text())
    return EXIT_OK if diff.same else EXIT_FINDINGS


def _describe(report) -> str:
    variant = report.variant
    where = f" ({display_path(variant.file)})" if variant.file else ""
    return f"{variant.name}{where}"


def _report_text(report) -> str:
    variant = report.variant
    proof = report.proof
    combos = len(proof.combinations)
    lines = [f"== {_describe(report)}"]
    if variant.description:
        lines.append(f"   {variant.description}")
    scope = f"{combos} choice combination{'s' if combos != 1 else ''}" if variant.is_spec \
        else "choices " + ", ".join(f"{k}={v}" for k, v in choices_in_force(
            variant.spec, proof.combinations[0]).items())
    if not proof.combinations[0]:
        scope = "the spec as written"
    if report.ok:
        lines.append(f"   proved: every shape agrees for all sizes the constraints allow "
                     f"({scope})")
        if report.concrete is not None:
            values = ", ".join(f"{k}={v}" for k, v in variant.dims.items())
            lines.append(f"   variant: every constraint holds and every shape evaluates "
                         f"({values})")
    else:
        lines.append(f"   {summary(report.findings)} ({scope})")
        for text in findings_text(report.findings):
            lines.append("")
            lines.append(text)
    if report.notes:
        lines.append("")
        lines.append("   not judged by the checker:")
        for note in report.notes:
            lines.append(f"   - {note.text}" + (f" [{note.source}]" if note.source else ""))
    return "\n".join(lines) + "\n"


def _report_json(report) -> dict:
    variant = report.variant
    return {
        "target": variant.name,
        "file": variant.file,
        "description": variant.description,
        "ok": report.ok,
        "choice_combinations": len(report.proof.combinations),
        "choices": report.proof.combinations[0] if not variant.is_spec else None,
        "dims": variant.dims,
        "findings": findings_data(report.findings),
        "notes": [{"text": n.text, "source": n.source, "line": n.line} for n in report.notes],
    }


def _shapes(args) -> int:
    variant = api.load(args.target, args.settings)
    report = api.check(variant)
    broken = [f for f in report.findings if f.kind in ("constraint-violated", "not-integral")
              and f.scope == "variant"]
    if broken:
        # sizes outside the spec have no shapes to show
        require_proved(variant, "no shapes listed", report)
    rows = api.shapes(variant, proved=False)
    if args.format == "json":
        print(to_json([row.__dict__ for row in rows]))
        return EXIT_OK
    for line in _variant_header(variant):
        print(line)
    print()
    headers = ("tensor", "role", "dtype", "symbolic shape", "concrete shape")
    table = [(r.name, r.role, r.dtype, r.symbolic, r.concrete) for r in rows]
    widths = [max([len(h)] + [len(row[i]) for row in table]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if not report.ok:
        sys.stdout.flush()
        require_proved(variant, "the shapes listed are those declared, not proved", report)
    return EXIT_OK


def _variant_header(variant) -> list[str]:
    """What a shapes table is of: the variant, every choice (defaults marked), the dims."""
    spec = variant.spec
    where = f" ({display_path(variant.file)})" if variant.file else ""
    lines = [f"== {variant.name}{where}: spec {spec.name}"]
    chosen = spec.choice_values(variant.choices)
    if chosen:
        # the choices in force: one that no `when` consults here changes nothing
        lines.append("   choices: " + ", ".join(
            f"{name}={value}{'' if name in variant.choices else ' (default)'}"
            for name, value in choices_in_force(spec, chosen).items()))
    lets = {let.dim: let.text for let in derived_dims(spec, chosen)}
    given = [f"{name}={value}" for name, value in variant.dims.items()]
    bound = [f"{name}={dim.value}" for name, dim in spec.dims.items()
             if dim.value is not None and name not in variant.dims]
    used = counts.used_dims(spec, chosen, counts.costs(spec, chosen))
    free = [name for name, dim in spec.dims.items()
            if dim.value is None and name not in variant.dims and name not in lets
            and name in used]
    lines.append("   dims: " + "; ".join(part for part in (
        ", ".join(given + bound),
        ", ".join(f"{name} = {text}" for name, text in lets.items()),
        f"symbolic: {', '.join(free)}" if free else "") if part))
    return lines


def _import(args) -> int:
    from tspec.importing import from_hf, writing
    text = from_hf(args.config, pooler=not args.no_pooler)
    if args.out is None:
        print(text, end="")
    else:
        writing.write(args.out, text, force=args.force)
        print(f"wrote {display_path(str(args.out))}")
    return 0


def _audit(args) -> int:
    from tspec import audit
    path = args.out or audit.default_path()
    if args.check:
        return _verdict_on_stale(audit.stale(path), display_path(str(path)),
                                 f"{display_path(str(path))} is current", "tspec audit")
    write_outputs({path: audit.render()}, force=args.force)     # as every command writes
    print(f"wrote {display_path(str(path))}")
    return EXIT_OK


def _verdict_on_stale(diff: str | None, what: str, current: str, command: str) -> int:
    """For --check: the diff and exit 1 when generated files are stale, else exit 0."""
    if diff:
        print(diff, end="")
        print(f"tspec: {what} is stale; run `{command}`", file=sys.stderr)
        return EXIT_FINDINGS
    print(current)
    return EXIT_OK


def _generate(args) -> int:
    from tspec.codegen import generate
    from tspec.codegen.backends import BACKENDS, backend
    if args.target is not None:
        return _generate_one(args)
    backends = (backend(args.backend).name,) if args.backend else tuple(BACKENDS)
    out = args.out or generate.default_dir()
    if args.check:
        folders = ", ".join(display_path(str(out / name)) for name in backends)
        return _verdict_on_stale(generate.stale(out, backends),
                                 f"generated code in {display_path(str(out))}",
                                 f"{folders} {'is' if len(backends) == 1 else 'are'} current",
                                 "tspec generate")
    for path in generate.write(out, backends, force=args.force):
        print(f"wrote {display_path(str(path))}")
    return EXIT_OK


def _generate_one(args) -> int:
    """`tspec generate VARIANT_OR_SPEC`: one model's module, with its runtime, in a folder."""
    from tspec.codegen import generate
    from tspec.codegen.backends import backend
    chosen = backend(args.backend or "numpy").name
    variant = api.load(args.target)
    generate.module_name(variant)                 # refused before anything is generated
    out = generate.variant_dir(variant, chosen, args.out)
    if args.check:
        module = display_path(str(out / f"{variant.name}.py"))
        return _verdict_on_stale(generate.stale_variant(variant, chosen, out),
                                 f"the code of {variant.name} in {display_path(str(out))}",
                                 f"{module} is current",
                                 generate.command(args.target, chosen, args.out))
    for path in generate.write_variant(variant, chosen, out, force=args.force):
        print(f"wrote {display_path(str(path))}")
    for note in generate.notes(variant, chosen):
        print(f"note: {note}")
    return EXIT_OK


def _docs(args) -> int:
    from tspec.docs import site as docs
    variants = [api.load(t, args.settings) for t in args.targets] if args.targets else \
        [v.with_settings(args.settings) for v in docs.shipped_variants()]
    out = args.out or docs.default_dir(variants)
    # the shipped documentation, as `tspec docs` alone writes it: with the manual's op reference
    shipped = not args.targets and not args.settings and args.out is None
    manual = docs.manual_dir() if shipped else None
    if args.check:
        what = display_path(str(out)) + ("" if manual is None else
                                         f" and {display_path(str(manual / docs.OPS_PAGE))}")
        return _verdict_on_stale(docs.stale(out, variants, args.format, manual=manual),
                                 f"documentation in {what}",
                                 f"{what} {'is' if manual is None else 'are'} current",
                                 "tspec docs")
    paths, unwritten = docs.write(out, variants, args.format, force=args.force, manual=manual)
    for path in paths:
        print(f"wrote {display_path(str(path))}")
    if unwritten:
        print(unwritten)
    return EXIT_OK


def _run(args) -> int:
    from tspec.execution.run import run, with_run_defaults
    variant = with_run_defaults(api.load(args.target, args.settings))
    require_proved(variant, "nothing to run")
    max_memory = None if args.max_memory is None else _size(args.max_memory, "--max-memory")
    result = run(variant, args.backend, args.seed, args.dtype, args.typecheck, args.decode,
                 max_memory, args.weights)
    decoded = result.decoded
    for line in _variant_header(variant):
        print(line)
    if result.weights is not None:
        print(f"   {result.parameters:,} parameters ({args.dtype}), "
              f"{result.weights.summary()}; tokens seed {args.seed}, backend "
              f"{args.backend}")
    else:
        print(f"   {result.parameters:,} parameters ({args.dtype}), seed {args.seed}, "
              f"backend {args.backend}")
    print()
    shown = [(name, shape) for name, shape in result.shapes
             if name.count(".") <= 1 or name.rsplit(".", 1)[-1] in ("Z_out", "Y_out")]
    width = max((len(name) for name, _ in shown), default=0)
    for name, shape in shown:
        print(f"{name:<{width}}  {' x '.join(map(str, shape))}")
    print()
    print(f"forward pass: {result.seconds * 1000:.1f} ms")
    if decoded is not None:
        times = sorted(decoded.step_seconds)
        print()
        print(f"decoding: prefill of {decoded.prompt} position{'s' * (decoded.prompt != 1)} "
              f"{decoded.prefill_seconds * 1000:.1f} ms, then {decoded.steps} steps of one "
              f"position: median "
              f"{times[len(times) // 2] * 1000:.1f} ms a step (fastest {times[0] * 1000:.1f}, "
              f"slowest {times[-1] * 1000:.1f})")
        print("cache of the first layer after the last step:")
        width = max(len(name) for name, _ in decoded.cache)
        for name, shape in decoded.cache:
            print(f"   {name:<{width}}  {' x '.join(map(str, shape))}")
        print(f"logits of prefill and every step against the full forward: max abs difference "
              f"{decoded.difference:.1e}")
        if not decoded.agrees:
            _say(f"tspec: decoding gives other logits than the full forward: they differ by "
                 f"{decoded.difference:.1e}, more than {args.dtype} rounding explains "
                 f"({decoded.tolerance:.1e} for logits up to {decoded.scale:.3g}); a state "
                 "keeps something other than what the full model computes there (check each "
                 "state's `from` and `update`)")
            return EXIT_FINDINGS
    return EXIT_OK


_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?", re.IGNORECASE)


def _size(text: str, option: str) -> int:
    """A size in bytes: 1000, 512M, 1.5G, 64GiB (K, M, G, T are powers of 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None or len(match.group(1)) > 20:
        raise UsageError(f"{option} takes a size such as 512M or 64G, got {text!r}")
    scale = 1024 ** " KMGT".index(match.group(2).upper() or " ")
    size = int(float(match.group(1)) * scale)
    if size < 1:
        raise UsageError(f"{option} must be at least one byte, got {text!r}")
    return size


def _list() -> int:
    print("specs:")
    specs, variants = api.builtin_specs(), api.builtin_variants()
    width = max(map(len, [*specs, *variants]))      # one column for both lists
    for name, path in specs.items():
        spec = api.read_spec(path)
        print(f"  {name:<{width}} {spec.title}")
    print("variants:")
    for name in variants:
        variant = api.load(name)
        print(f"  {name:<{width}} {variant.description}")
    print("finding kinds:")
    for kind, meaning in KINDS.items():
        print(f"  {kind:<20} {meaning}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
