"""Hostile names and text never reach generated code: each is refused with our own error, or
the generated code is the same program as with plain text (only docstrings and comments
differ). `tspec run` executes generated code, so this is what stands between a downloaded spec
and the user's machine."""

import ast
import functools
import os
import stat
from pathlib import Path

import fuzz  # tools/fuzz.py
import latex2mathml.converter
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import escape
from support.refusals import raises

from tspec import api
from tspec.cli import main
from tspec.codegen.generate import source
from tspec.codegen.rendering import render as render_module
from tspec.docs import diagram, markup
from tspec.docs import site as docs
from tspec.errors import (
    CodegenError,
    SpecError,
    SpecSyntaxError,
    TspecError,
    UsageError,
    VariantError,
)
from tspec.execution import loading as runtime
from tspec.files import HEADERS
from tspec.language.parser import parse, parse_file

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


@functools.cache
def plain() -> str:
    """The program of the spec with plain text (generated when a test first asks)."""
    return program(source(parse(SPEC.format(text="plain"), "t.tspec"), {}))


@pytest.mark.parametrize("text", HOSTILE, ids=[ascii(t[:24]) for t in HOSTILE])
def test_hostile_text_is_refused_or_changes_no_code(text):
    try:
        generated = source(parse(SPEC.format(text=text), "t.tspec"), {})
    except TspecError:
        return
    assert program(generated) == plain()


@pytest.mark.parametrize("text, error, message", [
    ("a\rb", SpecSyntaxError,
     "t.tspec:1:13: control character U+000D in the spec; specs are plain text"),
    ("a\u2028b", SpecSyntaxError,
     "t.tspec:1:13: line separator U+2028 in the spec; specs are plain text"),
    ("a\u2029b", SpecSyntaxError,
     "t.tspec:1:13: paragraph separator U+2029 in the spec; specs are plain text"),
    ("a\x85b", SpecSyntaxError,
     "t.tspec:1:13: control character U+0085 in the spec; specs are plain text"),
    ('a"""b', SpecSyntaxError, ('t.tspec:1:14: the string "" runs straight into the word b, on '
     'a line of 5 double quotes: is its closing quote missing? (a string opens and closes on '
     'one line)')),
])
def test_text_that_could_leave_a_comment_or_docstring_is_refused_by_the_parser(
        text, error, message):
    with pytest.raises(error) as caught:
        parse(SPEC.format(text=text), "t.tspec")
    assert str(caught.value) == message


def test_a_carriage_return_ending_a_line_is_accepted():
    spec = parse(SPEC.format(text="plain").replace("\n", "\r\n"), "t.tspec")
    assert program(source(spec, {})) == plain()


def test_backslashes_make_every_docstring_raw_and_keep_the_text():
    text = "\\N{LATIN SMALL LETTER A} \\x \\"
    generated = source(parse(SPEC.format(text=text), "t.tspec"), {})
    assert generated.startswith(f'{HEADERS[".py"]}r"""{text}.\n')
    # the model function's: the spec under the module's choices
    assert f'r"""{text}: the model under this module\'s choices. From {text} (t.tspec).' \
        in " ".join(generated.split())
    assert f'    r"""F. From {text} (t.tspec:6).\n' in generated       # and a block's
    module = ast.parse(generated)
    assert ast.get_docstring(module).startswith(f"{text}.\n")


@pytest.mark.parametrize("name, message", [
    ("\u0412atch", "t.tspec:1:5: unexpected character '\u0412'"),       # Cyrillic Ve
    ("B\u0430", "t.tspec:1:6: unexpected character '\u0430'"),          # Cyrillic a
    ('B"x', ('t.tspec:1:6: the string "x " runs straight into the word a, on a line of 3 double '
     'quotes: is its closing quote missing? (a string opens and closes on one line)')),
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
    assert error == (f"tspec: error: {path}:1:11: a string opened here is not closed on its "
                     "line (a string opens and closes on one line)\n")


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


# ---------------------------------------------------------------------------------------------
# The docs pages (issue 20): every text a spec or variant holds reaches HTML and Markdown
# escaped, and the pages pass the fuzzer's oracle (tools/fuzz.py, target docs): the HTML
# parsed holds no script, handler attribute, style, javascript: or data: URL or element outside
# the pages' own, SVG's and MathML's; the Markdown parsed holds no raw HTML, no link but to a
# sibling page, no code block but well-formed Mermaid, and no table row that lost or gained a
# cell.

HOSTILE_DOCS = [
    r"positions $\text{<script>alert(document.domain)</script>}$",
    r"$\href{javascript:alert(document.domain)}{x}$",
    "<script>alert(1)</script> & <img src=x onerror=alert(1)>",
    "[x](javascript:alert(1)) <javascript:alert(1)> x](javascript:y)",
    r"$\style{background:url(x)}{y}$ $\class{x}{y}$ $\cssId{x}{y}$ $\require{x}$",
    r"$\mathrm{</mtext><script>}$ </math><script> </title><script>",
    "costs $x^$ each",
    "a | b `c|d` $|x|$ \\| \\",
    "``` ~~~ ```mermaid",
    "# heading",
    "- item",
    "&#60;script&#62; &lt;b&gt;",
    "%%{init: {'securityLevel': 'loose'}}%% #quot; {{ x }}",
]


def _docs_case(text: str) -> dict:
    """The fuzzer's docs input with ``text`` in every place: the spec's title, source, note and
    every meaning, each variant's description, published source and note; the first variant's
    file name is the text too where a file can be so named."""
    in_spec = text.replace('"', "'")
    spec = fuzz.DOCS_SPEC.format(*[in_spec] * 10, "X @ W", in_spec)
    name = text if "/" not in text and len(text.encode()) < 200 else "v"
    variants = {}
    for variant, scale in ((name, 1), ("w", 2)):
        variants[variant] = fuzz._toml({
            "spec": "spec.tspec", "description": text,
            "dims": {"d_model": 256 * scale, "H": 8},
            "published": {"parameters": 16, "source": text, "note": text}})
    return {"spec": spec, "spec_name": "spec.tspec", "variants": variants}


@pytest.fixture(scope="module")
def fuzz_context(tmp_path_factory):
    return fuzz.Context(tmp_path_factory.mktemp("docs"))


@pytest.mark.parametrize("text", HOSTILE_DOCS, ids=[ascii(t[:24]) for t in HOSTILE_DOCS])
def test_hostile_text_on_the_docs_pages_is_shown_as_text(fuzz_context, text):
    case = _docs_case(text)
    pages = fuzz.run_docs(case, fuzz_context)       # raises on any problem of a page
    name = next(iter(case["variants"]))
    assert sorted(pages) == sorted(["index.md", "index.html", "w.md", "w.html", f"{name}.md",
                                    f"{name}.html"])
    for name, page in pages.items():
        assert fuzz.page_problems(name, page) == []
    # the description as the HTML page's heading: escaped, whole
    assert f"<h1>w: {escape(text)}</h1>" in pages["w.html"]


def test_the_oracle_finds_what_the_pages_used_to_hold():
    # the pages as tspec wrote them before issue 20: a live script in MathML's mtext, a
    # javascript: link on an mrow, raw HTML and a broken table row in Markdown, no policy
    html = ('<html><head></head><body><math><mrow><mtext><script>alert(1)</script></mtext>'
            '<mrow href="javascript:alert(1)"><mi>x</mi></mrow></mrow></math></body></html>')
    assert fuzz.page_problems("v.html", html) == [
        "element <script>", "a URL in href='javascript:alert(1)' on <mrow>",
        "the policies [], not one forbidding scripts"]
    markdown = ("| a | b |\n| --- | --- |\n| $\\text{<b>}$ | x | y |\n\n"
                "[x](javascript:alert(1))\n\n```\ncode\n```\n")
    assert fuzz.page_problems("v.md", markdown) == [
        "a row of 3 cells under 2: '| $\\\\text{<b>}$ | x | y |'",
        "html_inline '<b>'", "a link to 'javascript:alert(1)'", "a code block ''"]


def test_latex_with_markup_in_it_is_drawn_with_the_markup_as_text():
    assert markup.rich(r"positions $\text{<script>alert(document.domain)</script>}$") == (
        'positions <math xmlns="http://www.w3.org/1998/Math/MathML" display="inline"><mrow>'
        "<mtext>&lt;script&gt;alert(document.domain)&lt;/script&gt;</mtext></mrow></math>")
    assert markup.markdown(r"positions $\text{<script>alert(1)</script>}$") == (
        r"positions $\text{\lt script>alert(1)\lt /script>}$")


@pytest.mark.parametrize("latex", [
    r"\href{javascript:alert(1)}{x}",       # an attribute outside the list (href)
    r"\style{background:url(x)}{y}",        # style
    r"\class{x}{y}",                        # class
    r"\hspace{1em' onload='x}",             # a width that is no length
    r"\require{x}",                         # a command latex2mathml does not know
    "x^",                                   # LaTeX it cannot convert
    "{" * 2000 + "}" * 2000,                # too deep for it (a RecursionError inside)
    "x" * (markup.MAX_LATEX + 1),           # longer than a formula may be
])
def test_latex_the_allow_list_does_not_hold_is_shown_as_the_text_it_is(latex):
    assert markup.mathml(latex) is None
    assert markup.rich(f"costs ${latex}$ each") == escape(f"costs ${latex}$ each")
    shown = markup.markdown(f"costs ${latex}$ each")
    assert shown.startswith("costs \\$") and "<" not in shown and "](" not in shown


def test_latex_the_allow_list_holds_is_drawn_as_latex2mathml_draws_it():
    latex = r"d_{k} = \frac{d_{\mathrm{model}}}{H} \left(a<b\right) \, |x| \text{a&b}"
    assert markup.mathml(latex) == latex2mathml.converter.convert(latex).replace(
        "a&b", "a&amp;b")


@pytest.mark.parametrize("text, shown, in_a_cell", [
    ("<script>x</script> & y", "&lt;script&gt;x&lt;/script&gt; &amp; y", None),
    ("[x](javascript:y) [a][b] [c]: z [d]", "[x\\](javascript:y) [a\\][b] [c\\]: z [d\\]", None),
    ("a | b", "a \\| b", None),
    ("`a|b` x", "`a|b` x", "`a\\|b` x"),
    ("$|x| < y$", "$\\vert x\\vert  \\lt  y$", None),
    ("$x^$ costs", "\\$x^\\$ costs", None),
    ("$a`b$", "\\$a\\`b\\$", None),
    ("``` ~~~ \\", "\\`\\`\\` \\~\\~\\~ \\\\", None),
    ("# h", "\\# h", None),
    ("- item", "\\- item", None),
    ("12. item", "12\\. item", None),
    ("---", "\\---", None),
    ("  indented", "indented", None),
    ("line\nbreak\x1b[0m\u202e", "line\ufffdbreak\ufffd[0m\ufffd", None),
    ("d_model % H == 0, 0.5, -1", "d_model % H == 0, 0.5, -1", None),
])
def test_markdown_escapes_what_would_make_html_links_code_or_cells(text, shown, in_a_cell):
    assert markup.markdown(text) == shown
    assert markup.cell(text) == (shown if in_a_cell is None else in_a_cell)


def test_a_code_span_is_fenced_past_the_backticks_it_holds():
    assert markup.code("a``b") == "```a``b```"
    assert markup.code("`x") == "`` `x ``"
    assert markup.code("a|b", table=True) == "`a\\|b`"


def test_mermaid_labels_spell_every_other_character_as_an_entity():
    assert diagram._mermaid_text('Y = f(X) "q" <b> #1 `x` a|b %%{init}%% &\n') == (
        "Y = f(X) #quot;q#quot; #lt;b#gt; #35;1 #96;x#96; a#124;b #37;#37;#123;init#125;#37;#37; "
        "#38;#10;")


def test_every_html_page_carries_a_policy_that_forbids_scripts():
    pages = docs.files([api.load("gpt2_small")], "html")
    policy = ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
              "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\">\n")
    assert all(page.count(policy) == 1 for page in pages.values())


def test_a_link_to_a_page_is_a_relative_path_whatever_the_variant_is_called(tmp_path):
    (tmp_path / "spec.tspec").write_text(fuzz.DOCS_SPEC.format(*["t"] * 10, "X @ W", "t"))
    path = tmp_path / "javascript:alert(1).toml"
    path.write_text('spec = "spec.tspec"\n[dims]\nd_model = 256\nH = 8\n')
    pages = docs.files([api.load(path)])
    assert '<a href="javascript%3Aalert%281%29.html">javascript:alert(1)</a>' \
        in pages["index.html"]
    assert ("| javascript:alert(1) |  | [javascript:alert(1).md](javascript%3Aalert%281%29.md) "
            "| [javascript:alert(1).html](javascript%3Aalert%281%29.html) |") in pages["index.md"]


@pytest.mark.parametrize("key", ["source", "note"])
@pytest.mark.parametrize("char, kind", [("\n", "control character U+000A"),
                                        ("\x1b", "control character U+001B"),
                                        ("\u2028", "line separator U+2028"),
                                        ("\u202e", "control character U+202E")])
def test_published_text_that_does_not_show_or_ends_a_line_is_refused(tmp_path, key, char,
                                                                     kind):
    path = tmp_path / "v.toml"
    published = {"parameters": 16, "source": "s", "note": "n"} | {key: f"a{char}b"}
    path.write_text(fuzz._toml({"spec": "transformer", "published": published}))
    line = 5 if key == "source" else 6
    with raises(VariantError, f"{path}:{line}: [published] {key} holds the {kind}"):
        api.load(path)


# single characters and pieces of markup, and the fuzzer's hostile texts whole
TOKENS = ["<", ">", "&", '"', "'", "`", "$", "|", "\\", "[", "]", "(", ")", "!", ":", "#", "*",
          "_", "~", "-", "=", "%", "{", "}", " ", "\n", "1.", "script", "javascript:", "on",
          "img src=x onerror=alert(1)", r"\text{", r"\href{", r"\frac", "^", "x", "a", "é",
          *fuzz.DOCS_TEXT]


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=12).map("".join))
def test_any_text_is_safe_in_html_and_in_a_markdown_cell_or_paragraph(text):
    html = f'<meta http-equiv="Content-Security-Policy" content="{fuzz.POLICY}">{markup.rich(text)}'
    assert fuzz.page_problems("x.html", html) == []
    row = f"| a | b |\n| --- | --- |\n| {markup.cell(text)} | {markup.cell(text)} |\n\n"
    assert fuzz.page_problems("x.md", row + markup.markdown(text) + "\n") == []


# Any text through `tspec docs`, as a command: pages, or one error line
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


@pytest.mark.parametrize("name, shown", [(b"bad\xff.tspec", "bad\\xff.tspec"),
                                         (b"\xe9t\xe9.tspec", "\\xe9t\\xe9.tspec")])
def test_a_spec_path_that_is_not_utf8_is_named_by_its_escapes(tmp_path, name, shown):
    # before: the path's stand-ins for its bytes (lone surrogates) reached the generated
    # module, which then could not be encoded or compiled
    path = tmp_path / os.fsdecode(name)
    path.write_text(SPEC.format(text="plain"))
    generated = source(parse_file(path), {})
    assert f"{tmp_path}/{shown}" in generated
    assert program(generated) == plain()
    compile(generated, "generated.py", "exec")
