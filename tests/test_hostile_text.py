"""Hostile names and text never reach generated code: each is refused with our own error, or
the generated code is the same program as with plain text (only docstrings and comments
differ). `tspec run` executes generated code, so this is what stands between a downloaded spec
and the user's machine."""

import ast
import os
import stat
from pathlib import Path

import pytest

from codegen import render as render_module
from codegen import runtime
from codegen.generate import source
from spec.cli import main
from spec.errors import CodegenError, SpecError, SpecSyntaxError, TspecError, UsageError
from spec.language import parse, parse_file

# every place a spec holds free text: the title, a source, a note, a dim's, a parameter's, a
# computed tensor's and an input's meaning
SPEC = '''spec tiny "{text}"
source "{text}"
note "{text}"
dim B "{text}"
dim d "{text}"
block f(X "B d") -> Y:
    param W "d d" "{text}"
    Y "B d" "{text}" = X @ W
input X "B d" "{text}"
Y "B d" "{text}" = f(X) as first
output Y
'''

HOSTILE = [
    "\rimport os\ros.system('echo owned')\r",          # a lone CR ends a line in Python
    "\r\nimport os",
    "end of docstring \"\"\"; import os",
    "\\N{no such character}",                          # an escape that does not compile
    "\\x",                                             # an invalid escape
    "trailing backslash \\",
    "{{ module }} {% for x in y %}{% endfor %} {# comment #}",
    "it's 'quoted'",
    "\u2028import os",                                 # line separator
    "\u2029import os",                                 # paragraph separator
    "\x85import os",                                   # next line (C1 control)
    "\x0cimport os",                                   # form feed
    "\x00",
    "\u202eevil\u202c",                                # right-to-left override
    "\ufeffzero width no-break",
    "# not a comment",
    "x" * 10_000,
    "\u0430\u0441\u0435 look-alikes \U0001d400",
]


def program(text: str) -> str:
    """The generated code with every docstring emptied: what runs, without what reads."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                first.value.value = ""
    return ast.dump(tree)


PLAIN = program(source(parse(SPEC.format(text="plain"), "t.tspec"), {}))


@pytest.mark.parametrize("text", HOSTILE, ids=[ascii(t[:24]) for t in HOSTILE])
def test_hostile_text_is_refused_or_changes_no_code(text):
    try:
        generated = source(parse(SPEC.format(text=text), "t.tspec"), {})
    except TspecError:
        return
    assert program(generated) == PLAIN


@pytest.mark.parametrize("text, error, message", [
    ("a\rb", SpecSyntaxError,
     "t.tspec:1:13: control character U+000D in the spec; specs are plain text"),
    ("a\u2028b", SpecSyntaxError,
     "t.tspec:1:13: line separator U+2028 in the spec; specs are plain text"),
    ("a\u2029b", SpecSyntaxError,
     "t.tspec:1:13: paragraph separator U+2029 in the spec; specs are plain text"),
    ("a\x85b", SpecSyntaxError,
     "t.tspec:1:13: control character U+0085 in the spec; specs are plain text"),
    ('a"""b', SpecSyntaxError, "t.tspec:1:17: unexpected character '\"'"),
])
def test_text_that_could_leave_a_comment_or_docstring_is_refused_by_the_parser(
        text, error, message):
    with pytest.raises(error) as caught:
        parse(SPEC.format(text=text), "t.tspec")
    assert str(caught.value) == message


def test_a_carriage_return_ending_a_line_is_accepted():
    spec = parse(SPEC.format(text="plain").replace("\n", "\r\n"), "t.tspec")
    assert program(source(spec, {})) == PLAIN


def test_backslashes_make_every_docstring_raw_and_keep_the_text():
    text = "\\N{LATIN SMALL LETTER A} \\x \\"
    generated = source(parse(SPEC.format(text=text), "t.tspec"), {})
    assert generated.startswith(f'r"""{text}.\n')
    assert f'    r"""{text}\n' in generated         # the model function's summary: the title
    module = ast.parse(generated)
    assert ast.get_docstring(module).startswith(f"{text}.\n")


@pytest.mark.parametrize("name, message", [
    ("\u0412atch", "t.tspec:1:5: unexpected character '\u0412'"),       # Cyrillic Ve
    ("B\u0430", "t.tspec:1:6: unexpected character '\u0430'"),          # Cyrillic a
    ('B"x', "t.tspec:1:15: unexpected character '\"'"),
    ("B'x", "t.tspec:1:6: unexpected character \"'\" (strings use double quotes)"),
    ("B{{x}}", "t.tspec:1:6: unexpected character '{'"),
    ("B{%x%}", "t.tspec:1:6: unexpected character '{'"),
    ("__class__", ("t.tspec:1: dim name '__class__' is not a plain identifier (ASCII letter "
                   "first, then letters, digits, underscores)")),
    ("__import__", ("t.tspec:1: dim name '__import__' is not a plain identifier (ASCII letter "
                    "first, then letters, digits, underscores)")),
    ("eval", "t.tspec:1: dim name 'eval' shadows a Python builtin"),
    ("exec", "t.tspec:1: dim name 'exec' shadows a Python builtin"),
    ("None", "t.tspec:1: dim name 'None' is a Python keyword"),
    ("B" * 65, ("t.tspec:1: dim name 'BBBBBBBBBBBBBBBBBBBB'... is 65 characters long; the "
                "limit is 64")),
])
def test_hostile_names_are_refused(name, message):
    with pytest.raises(TspecError) as caught:
        parse(f'dim {name} "a dim"\n', "t.tspec")
    assert str(caught.value) == message


def test_a_newline_in_a_name_splits_the_statement_and_is_refused():
    with pytest.raises(SpecError) as caught:
        parse('dim B\nimport "a dim"\n', "t.tspec")
    assert str(caught.value) == "t.tspec:2: tensor name 'import' is a Python keyword"


@pytest.mark.parametrize("file_name, shown", [
    ('x"""y.tspec', 'x"""y.tspec'),
    ("x\ny.tspec", "x\\ny.tspec"),
    ("x\ry.tspec", "x\\ry.tspec"),
])
def test_a_spec_path_that_generated_code_cannot_name_is_refused(tmp_path, file_name, shown):
    path = tmp_path / file_name
    path.write_text(SPEC.format(text="plain"))
    spec = parse_file(path)
    with pytest.raises(CodegenError) as caught:
        source(spec, {})
    assert str(caught.value).startswith("the spec's path '")
    assert shown in str(caught.value)


def test_the_cli_refuses_a_hostile_spec_without_a_traceback(tmp_path, capsys):
    # read from a file, a lone CR is a line break (as Python reads it): the string is cut
    path = tmp_path / "hostile.tspec"
    path.write_text(SPEC.format(text="\rimport os\r"), newline="")
    assert main(["run", str(path)]) == 2
    error = capsys.readouterr().err
    assert error == f"tspec: error: {path}:1:11: unexpected character '\"'\n"


def test_generated_code_that_does_not_parse_is_an_internal_error(monkeypatch):
    # the last gate: were the text check ever to let a docstring's end through, the
    # generated code would not parse, and rendering says so instead of returning it
    monkeypatch.setattr(render_module, "_docstring_text", lambda text, what: text)
    spec = parse(SPEC.format(text="plain"), "t.tspec")
    spec.title = 'x"""'
    with pytest.raises(CodegenError) as caught:
        source(spec, {})
    assert str(caught.value).startswith("internal error: the code generated for tiny does "
                                        "not parse (")


def test_generated_code_is_loaded_only_from_a_private_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.tempfile, "gettempdir", lambda: str(tmp_path))
    folder = tmp_path / f"tspec-generated-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)                              # another user could plant a module here
    with pytest.raises(UsageError) as caught:
        runtime.load_source("X = 1\n")
    assert str(caught.value) == (f"{folder} is writable by other users; generated code is "
                                 "not loaded from it (remove it, or set TMPDIR)")
    folder.chmod(0o700)
    assert runtime.load_source("X = 1\n").X == 1
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_generated_code_is_not_loaded_through_a_symlinked_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.tempfile, "gettempdir", lambda: str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    Path(tmp_path / f"tspec-generated-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(UsageError) as caught:
        runtime.load_source("X = 1\n")
    assert str(caught.value) == (f"{tmp_path / f'tspec-generated-{os.getuid()}'} is a "
                                 "symbolic link; generated code is not loaded through it "
                                 "(remove it, or set TMPDIR)")


def test_an_error_naming_a_path_with_a_line_break_is_one_line(tmp_path, capsys):
    path = tmp_path / "x\ny.tspec"
    path.write_text('dim B "b"\ndim B "b"\n')
    assert main(["check", str(path)]) == 2
    shown = str(path).replace("\n", "\\n")
    assert capsys.readouterr().err == f"tspec: error: {shown}:2: dim B is declared twice (first at line 1)\n"


# Text that reaches the documentation pages: LaTeX a converter refuses ends in one error line
LATEX = ["costs $x^$ each", "$\\frac$", "$_{$", "${}_&amp;\\right)_x&\\left($", "$\\begin{x}$",
         "$x$ and $y^{2}$", "$<script>$", "`$x^$`"]


@pytest.mark.parametrize("text", HOSTILE + LATEX, ids=[ascii(t[:24]) for t in HOSTILE + LATEX])
def test_hostile_text_in_the_docs_ends_in_pages_or_one_error_line(tmp_path, capsys, text):
    path = tmp_path / "t.tspec"
    path.write_text(SPEC.format(text=text), encoding="utf-8", newline="")
    code = main(["docs", str(path), "--set", "d=4", "--format", "all", "--out",
                 str(tmp_path / "docs")])
    err = capsys.readouterr().err
    assert code in (0, 2)
    assert err == "" if code == 0 else err.startswith("tspec: error: ") and err.count("\n") == 1


def test_latex_a_converter_refuses_is_named(tmp_path, capsys):
    # before: latex2mathml's MissingSuperScriptOrSubscriptError, a traceback
    path = tmp_path / "t.tspec"
    path.write_text(SPEC.format(text="costs $x^$ each"))
    assert main(["docs", str(path), "--format", "html", "--out", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == (
        "tspec: error: $x^$ is not LaTeX that HTML pages can show as MathML "
        "(MissingSuperScriptOrSubscriptError): fix it in the spec, or write the Markdown pages "
        "alone with --format md\n")
    assert main(["docs", str(path), "--format", "md", "--out", str(tmp_path / "d")]) == 0


@pytest.mark.parametrize("name, shown", [(b"bad\xff.tspec", "bad\\xff.tspec"),
                                         (b"\xe9t\xe9.tspec", "\\xe9t\\xe9.tspec")])
def test_a_spec_path_that_is_not_utf8_is_named_by_its_escapes(tmp_path, name, shown):
    # before: the path's stand-ins for its bytes (lone surrogates) reached the generated
    # module, which then could not be encoded or compiled
    path = tmp_path / os.fsdecode(name)
    path.write_text(SPEC.format(text="plain"))
    generated = source(parse_file(path), {})
    assert f"{tmp_path}/{shown}" in generated
    assert program(generated) == PLAIN
    compile(generated, "generated.py", "exec")
