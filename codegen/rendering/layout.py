"""Line breaking, in one place: statements, calls, sums and prose on lines of a width.

A statement ends in its comment, or has it on the line above when that does not fit; a call
too long for one line has its arguments on the next, or one a line; an assignment of a long
sum is bracketed and broken before an operator; a long sum of bytes is broken before a + or -.
Everything here takes and gives text; what the text says comes from the printer.
"""

import itertools
import json
import textwrap

LINE_LENGTH = 100
BODY = 96               # 100 less a function body's indent
SHORT_LITERAL = 80      # a constant's dict of names on one line: room for "NAME = " before it


def commented(statement: str, comment: str, width: int = BODY) -> tuple[str, ...]:
    """A statement with its comment at the end, or above it when the line is long."""
    line = f"{statement}  # {comment}" if comment else statement
    if len(line) <= width:
        return (line,)
    if len(statement) <= width:
        return (f"# {comment}", statement) if comment else (statement,)
    lines = broken(statement, width)
    if comment and lines[-1] == ")":
        return lines[:-1] + (f")  # {comment}",)
    return ((f"# {comment}",) if comment else ()) + lines


def explained(statement: str, comment: str, width: int) -> list[str]:
    """A declaration with its comment at the end, or, when long, the comment wrapped on the
    lines above it."""
    line = f"{statement}  # {comment}"
    if len(line) <= width:
        return [line]
    return [*prose(comment, width - 2, "# ", "# "), statement]


def returned_sum(total: list[str], largest: list[list[str]], width: int) -> list[str]:
    """``return total + max(each of largest)`` for sums given as tokens (each after the first
    starting with its sign): one line where it fits and there is no max, else ``return (``,
    the sum broken before a + or -, ``)``."""
    line = f"return {' '.join(total)}"
    if not largest and len(line) <= width:
        return [line]
    lines = sum_lines(total, width - 4)
    if largest:
        lines.append("+ max(" if lines else "max(")
        for each in largest:            # each call's: the largest may be any
            inner = sum_lines(each, width - 8)
            inner[-1] += ","
            lines += ["    " + line for line in inner]
        lines.append(")")
    return ["return (", *("    " + line for line in lines), ")"]


def broken(statement: str, width: int) -> tuple[str, ...]:
    """``name = a + b`` too long for one line, as ``name = (`` / ``a`` / ``+ b`` / ``)``,
    broken before the last top-level operator that lets the first part fit."""
    name, _, expression = statement.partition(" = ")
    splits = top_level(expression, (" + ", " - ", " @ ", " * "))
    fitting = [i for i in splits if len(expression[:i]) + 4 <= width]
    if not fitting:
        return (statement,)
    at = fitting[-1]
    return (f"{name} = (", "    " + expression[:at], "    " + expression[at + 1:], ")")


def call(head: str, parts: list[str], comment: str, width: int = BODY) -> tuple[str, ...]:
    """``head(parts)`` with its comment; arguments on their own line when long."""
    end = f"  # {comment}" if comment else ""
    line = f"{head}({', '.join(parts)}){end}"
    if len(line) <= width:
        return (line,)
    inner = "    " + ", ".join(parts)
    if len(inner) <= width:
        return (f"{head}(", inner, f"){end}")
    return (f"{head}(",) + tuple(f"    {part}," for part in parts) + (f"){end}",)


def indented(lines, by: str = "    ") -> list[str]:
    return [by + line if line else line for line in lines]


def terms(code: str) -> list[str]:
    """A sum's code split into its terms, each after the first with its sign: "+ x", "- y"."""
    starts = [0] + [index + 1 for index in top_level(code, (" + ", " - "))] + [len(code)]
    return [code[a:b].strip() for a, b in itertools.pairwise(starts)]


def top_level(code: str, operators: tuple[str, ...]) -> list[int]:
    """Where an operator (" + ", ...) stands in code outside every bracket."""
    depth, found = 0, []
    for index, character in enumerate(code):
        depth += character in "([{"
        depth -= character in ")]}"
        if depth == 0 and code[index:index + 3] in operators:
            found.append(index)
    return found


def sum_lines(tokens: list[str], width: int) -> list[str]:
    """Tokens of a sum on lines of at most ``width``, broken before a + or -."""
    lines, current = [], ""
    for token in tokens:
        if current and len(current) + 1 + len(token) > width:
            lines.append(current)
            current = token
        else:
            current = f"{current} {token}" if current else token
    return lines + [current] if current else lines


def literal(value: dict | list | str | None, indent: str = "", first: str = "") -> list[str]:
    """None, or a nested dict of names (a one-item list for every layer of a stack) as Python
    lines, one item a line (a dict of strings that fits, on one); the first line starts with
    ``first``, the closing one with ``indent``."""
    if value is None:
        return [f"{first}None"]
    if isinstance(value, str):
        return [f"{first}{json.dumps(value)}"]       # quoted and escaped as Python reads it
    if isinstance(value, list):
        lines = literal(value[0], indent, first + "[")
        lines[-1] += "]"
        return lines
    if value and all(isinstance(item, str) for item in value.values()):
        line = first + "{" + ", ".join(f"{json.dumps(key)}: {json.dumps(item)}"
                                       for key, item in value.items()) + "}"
        if len(line) <= SHORT_LITERAL:     # a dict of names that fits: on one line
            return [line]
    lines = [first + "{"]
    for key, item in value.items():
        inner = literal(item, indent + "    ", f"{indent}    {json.dumps(key)}: ")
        inner[-1] += ","
        lines += inner
    return lines + [indent + "}"]


def packed(items: list[str], width: int) -> list[str]:
    """Items joined by spaces into lines of at most ``width`` (an item longer has its own)."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 1 + len(item) <= width:
            lines[-1] += " " + item
        else:
            lines.append(item)
    return lines


def prose(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """Text wrapped at spaces (never inside a word) on lines of at most ``width``."""
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False) or [first]
