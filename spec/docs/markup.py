"""Text on the docs pages, made safe for HTML and for Markdown.

Spec and variant files are shared between people, so every piece of their text that reaches a
page (titles, meanings, sources, notes, descriptions, file names) goes through here. Docs text
is Markdown-ish: ``$...$`` is LaTeX, `` `...` `` is code, the rest is plain text.

- HTML (``rich``): plain text and code are escaped. LaTeX becomes MathML through latex2mathml's
  element tree (its own string output leaves text unescaped: ``\\text{<script>}`` is a live
  script), whose every element and attribute must be on an allow-list, with values that are
  plain words, numbers and lengths (no links, styles, classes or ids); ElementTree then writes
  it, escaping the text. LaTeX that latex2mathml cannot convert, that is longer than MAX_LATEX,
  or whose MathML falls outside the list (``\\href``, ``\\style``, ``\\class``, a command
  latex2mathml does not know) is shown as the text it is.
- Markdown (``markdown``; the Markdown templates escape every value they place with it unless it
  is ``Markdown`` already): plain text has the characters that would make HTML, links, code,
  math, table cells or fences (``\\ ` $ | ~ < > &``, and ``]`` before ``( [ :``) escaped, and a
  block marker at its start (``#``, ``-``, ``1.``, ...) too; code keeps its text; LaTeX that
  ``rich`` would show as MathML (and holds no backtick) stays LaTeX, with ``<``, ``|`` and
  ``](`` spelled so that they draw the same but make no HTML, cell or link; other LaTeX is
  plain text. Characters that end a line or do not show become U+FFFD in Markdown, so
  a value is one line.
"""

import functools
import re
import urllib.parse
from xml.etree.ElementTree import Element, tostring

import latex2mathml.converter
from markupsafe import Markup, escape

from tspec.errors import hidden

MATHML_NS = "http://www.w3.org/1998/Math/MathML"
MAX_LATEX = 2000                 # characters of one formula; past it, it is shown as text
ELEMENTS = frozenset(["math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msub", "msup",
                      "msubsup", "mfrac", "msqrt", "mroot", "mstyle", "mpadded", "mphantom",
                      "menclose", "mover", "munder", "munderover", "mtable", "mtr", "mtd"])
ATTRIBUTES = frozenset(["display", "mathvariant", "stretchy", "fence", "separator", "lspace",
                        "rspace", "form", "accent", "accentunder", "movablelimits", "largeop",
                        "symmetric", "minsize", "maxsize", "width", "height", "depth",
                        "linethickness", "columnalign", "rowalign", "columnlines", "rowlines",
                        "columnspacing", "rowspacing", "frame", "framespacing", "equalrows",
                        "equalcolumns", "displaystyle", "scriptlevel", "notation", "mathsize",
                        "mathcolor", "mathbackground", "linebreak"])
_VALUE = re.compile(r"[A-Za-z0-9 .#%+-]*\Z")            # words, numbers, lengths, colours
_CHARACTER_REFERENCE = re.compile(r"&amp;(#x[0-9A-Fa-f]{1,6};|#[0-9]{1,7};)")
_RICH = re.compile(r"\$([^$]+)\$|`([^`]+)`")
_CODE = re.compile(r"`([^`]+)`")


class _Outside(Exception):
    """MathML that the allow-list does not hold."""


# -- MathML

def mathml(latex: str, display: str = "inline") -> str | None:
    """``latex`` as MathML that the allow-list holds, or None when it cannot be shown so.

    Formulas that differ only in the numbers of their names (``\\mathrm{X1} = ...`` and
    ``\\mathrm{X2} = ...``, the equations of a chain) are converted once, with a
    placeholder for each such number that is put back in the MathML: latex2mathml takes a
    third of a millisecond a formula, which for 20,000 equations was most of a page's time."""
    if len(latex) > MAX_LATEX:
        return None
    numbers = []

    def placeholder(found: re.Match) -> str:
        numbers.append(found.group())
        return f"{_PLACEHOLDER}{len(numbers) - 1:06d}9"

    template = _NAME_NUMBER.sub(placeholder, latex) if not _LONG_NUMBER.search(latex) else latex
    if not numbers:
        return _mathml(latex, display)
    drawn = _mathml(template, display)
    if drawn is None:
        return _mathml(latex, display)
    marks = [f"{_PLACEHOLDER}{index:06d}9" for index in range(len(numbers))]
    if any(drawn.count(mark) != 1 for mark in marks):      # not as it was drawn: no template
        return _mathml(latex, display)
    for mark, number in zip(marks, numbers):
        drawn = drawn.replace(mark, number)
    return drawn


# a number in a name, after a letter (``X12``): tokenized as a number whatever its digits (not
# after _ or ^, where one digit alone is the script, nor a decimal's part)
_NAME_NUMBER = re.compile(r"(?<=[A-Za-z])[0-9]+(?![0-9]|\.[0-9])")
_LONG_NUMBER = re.compile(r"[0-9]{8}")       # digits a placeholder could be mistaken for
_PLACEHOLDER = "9087"                         # then six digits and a 9: 11 digits in all


@functools.lru_cache(maxsize=4096)
def _mathml(latex: str, display: str) -> str | None:
    """``mathml`` of one formula, converted."""
    try:
        tree = latex2mathml.converter.convert_to_element(latex, display=display)
    except Exception:  # noqa: BLE001 (a third-party parser of user text: any failure means
        return None    # "not a formula we can draw", and the text is shown as written)
    try:
        _check(tree)
    except _Outside:
        return None
    # latex2mathml writes some characters as character references in its text (&#x0003C;);
    # ElementTree escapes them with the rest, and only they are turned back
    return _CHARACTER_REFERENCE.sub(r"&\1", tostring(tree, encoding="unicode"))


def _check(tree: Element) -> None:
    for element in tree.iter():
        if element.tag not in ELEMENTS:
            raise _Outside(element.tag)
        for name, value in element.attrib.items():
            if name == "xmlns" and element is tree and value == MATHML_NS:
                continue
            if name not in ATTRIBUTES or not _VALUE.match(value):
                raise _Outside(name)
        if "\\" in (element.text or ""):       # a command latex2mathml does not know
            raise _Outside(element.text)


def rich(text) -> Markup:
    """Docs text for HTML: $...$ as MathML, `...` as code, the rest escaped."""
    return _rich(str(text))


@functools.lru_cache(maxsize=4096)
def _rich(text: str) -> Markup:
    """``rich`` of a text: once for each (a page's FLOP formulas and shapes repeat)."""
    if "$" not in text:         # code and text alone (an equation's inputs): escaped at once,
        #                         which no backtick and no $ comes out of
        return Markup(_CODE.sub(r"<code>\1</code>", str(escape(text))))
    out, end = [], 0
    for match in _RICH.finditer(text):
        out.append(escape(text[end:match.start()]))
        latex, code = match.groups()
        if code is not None:
            out.append(Markup("<code>") + escape(code) + Markup("</code>"))
        else:
            drawn = mathml(latex)
            out.append(escape(match.group()) if drawn is None else Markup(drawn))
        end = match.end()
    out.append(escape(text[end:]))
    return Markup("").join(out)


def formula(latex: str) -> Markup:
    """An equation's LaTeX as a block of MathML; as escaped code when it cannot be drawn."""
    drawn = mathml(latex, "block")
    return Markup("<p><code>{}</code></p>").format(latex) if drawn is None else Markup(drawn)


# -- Markdown

class Markdown(str):
    """Text that is Markdown already: the Markdown templates place it as it is."""


_MD_ESCAPES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_MD_SPECIAL = re.compile(r"[\\`$|~<>&]|\](?=[(\[:]|\Z)")
# what makes a line a heading, a list item or a rule: the group is the character escaped
_BLOCK_START = re.compile(r"(#){1,6}(?=\s|\Z)|([-+*])(?=\s|\Z)|\d{1,9}([.)])(?=\s|\Z)"
                          r"|([-*_])(?:\s*\4){2,}\s*\Z")
_MD_MATH = re.compile(r"\\[^|<]|\\?[|<]|\](?=\()")
_MATH_SPELLED = {"|": r"\vert ", "\\|": r"\Vert ", "<": r"\lt ", "\\<": r"\lt ", "]": "]{}"}


def markdown(value, table: bool = False) -> Markdown:
    """Docs text for Markdown (see the module's docstring); ``table``: in a table's cell,
    where a ``|`` in code is escaped too."""
    if isinstance(value, Markdown):
        return value
    return _markdown(str(value), table)


@functools.lru_cache(maxsize=4096)
def _markdown(text: str, table: bool) -> Markdown:
    """``markdown`` of a text: once for each (a page's FLOP formulas and shapes repeat)."""
    text = _shown(text)
    out, end = [], 0
    for match in _RICH.finditer(text):
        out.append(_md_text(text[end:match.start()]))
        latex, code = match.groups()
        if code is not None:
            out.append(f"`{code.replace('|', chr(92) + '|') if table else code}`")
        elif mathml(latex) is None or "`" in latex:
            out.append(_md_text(match.group()))
        else:
            out.append(f"${_md_math(latex)}$")
        end = match.end()
    out.append(_md_text(text[end:]))
    joined = "".join(out).lstrip()
    start = _BLOCK_START.match(joined)
    if start:
        at = start.start(start.lastindex)
        joined = f"{joined[:at]}\\{joined[at:]}"
    return Markdown(joined)


def _md_text(text: str) -> str:
    return _MD_SPECIAL.sub(lambda m: _MD_ESCAPES.get(m.group()) or "\\" + m.group(), text)


def _md_math(latex: str) -> str:
    """LaTeX in Markdown: < (which could open an HTML tag) and | (which ends a table's cell)
    spelled as commands, and an empty group between ] and ( (which would make a link): they
    draw the same."""
    return _MD_MATH.sub(lambda m: _MATH_SPELLED.get(m.group(), m.group()), latex)


def cell(value) -> Markdown:
    return markdown(value, table=True)


def cells(values) -> Markdown:
    """A table row's cells, escaped and joined."""
    return Markdown(" | ".join(markdown(v, table=True) for v in values))


def code(value, table: bool = False) -> Markdown:
    """Text as one code span (a fence of backticks longer than any run in the text)."""
    text = _shown(str(value))
    if table:
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    padded = f" {text} " if not text or text.startswith("`") or text.endswith("`") else text
    return Markdown(f"{fence}{padded}{fence}")


def latex(value) -> Markdown:
    """LaTeX that the template itself puts between $ or $$ signs."""
    return Markdown(_md_math(_shown(str(value))))


def _shown(text: str) -> str:
    """``text`` with every character that ends a line or does not show as U+FFFD (a printable
    text, as nearly every one is, at once: no such character is printable)."""
    if text.isprintable():
        return text
    return "".join("\ufffd" if hidden(c) else c for c in text)


def finalize(value):
    """Jinja's finalize for Markdown templates: every value is escaped unless it is Markdown."""
    return markdown(value)


# -- links

def page_link(name: str, suffix: str) -> str:
    """A relative link to the page of a variant named ``name``: every character that could make
    it a scheme, a query or another folder is percent-encoded."""
    return urllib.parse.quote(name, safe="") + suffix
