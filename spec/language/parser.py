"""The spec language: text that reads like the math, parsed into ``spec.model`` records.

A spec is a sequence of lines; a line ending in ':' opens an indented body (``block``, ``when``,
``else``). The statements::

    spec NAME "title"                       name and title of the model
    source "seed 001, section 4"            where the following records come from
    note "text"                             something the checker cannot judge
    reused NAME as A, B "what each is"      the source uses NAME for different things, named
                                            A and B here (dims, tensors or ops; a finding)
    dim NAME "meaning" [= VALUE]            a dimension (a positive integer), maybe bound
    let NAME = EXPR                         a derived dim: let d_k = d_model / H
    require EXPR                            a constraint: d_model % H == 0, T <= max_len
    choice NAME = a | b | c "meaning"       a design choice; the first option is the default
    when NAME == a:  /  when NAME in a | b:  /  when NAME == a and OTHER != b:  /  else:
    input NAME[FAMILY] "shape" DTYPE "meaning"
    param NAME[FAMILY] "shape" "meaning"    a learned parameter ("?" leaves the shape unstated;
                                            `? implied "shape"`: unstated, but the source's
                                            text implies it, which its uses must accept)
    state NAME[FAMILY] "shape" "meaning" from TENSOR
                                            in a block: a tensor kept between calls (a decoding
                                            step's key-value cache), one per instance like a
                                            parameter; prefill starts it as the full model's
                                            TENSOR at the same place
    update STATE = TENSOR                   in a block: the state's value for the next call
    tensor NAME[FAMILY] "shape" "meaning"   an intermediate declared ahead of its equation
    output NAME, NAME                       the model's outputs (top level, or under a
                                            top-level `when`: outputs that differ by choice)
    NAME[FAMILY] "shape" = EXPR             an equation; the shape is the claim to check
    NAME "shape" = BLOCK(ARGS) [as NAME]    a call of a block
    NAME "shape" = repeat(N, BLOCK, ARGS)   a stack of N calls, each feeding the next
    block NAME(ARG "shape", ...) -> OUT:    a reusable block with its own dims and params
    param NAME "shape" "meaning" if CHOICE == a
                                            a parameter (or input) absent under the other
                                            options: a term of + or - that reads it drops
    NAME "shape" = CHOICE(X)                the op the choice's option names (an activation)
    from BLOCK with NAME = VALUE, ...       first in a block: BLOCK's declarations and
                                            equations, its inputs and local dims bound; an
                                            equation of the same output replaces BLOCK's
    rename BLOCK as NEW (TENSOR as NEW, ...)
                                            at the top level: under the choices it sits in,
                                            the block, its calls and these tensors renamed

Nothing here evaluates text: expressions go through ``spec.expr``'s parser and whitelist.

The work is done in three stages, a module each, in the order the text flows through them:
``reading`` (lines into raw statements), ``building`` (raw statements into the model's
records, names resolved in each scope) and ``terms`` (an equation's expression into the model's
terms). ``parse`` and ``parse_file`` run them.
"""

import hashlib
from pathlib import Path

from tspec.errors import SpecError, SpecSyntaxError, hidden, hidden_kind
from tspec.files import read_limited
from tspec.language.building import MAX_EXPANDED, Builder
from tspec.language.model import Spec
from tspec.language.reading import MAX_NESTING, Reader
from tspec.language.terms import MAX_WAYS

MAX_SPEC_BYTES = 1_000_000

# the stages' limits are defined where they are used, and named here as before
__all__ = ["MAX_EXPANDED", "MAX_NESTING", "MAX_SPEC_BYTES", "MAX_WAYS", "parse", "parse_file"]


def parse(text: str, file: str | None = None) -> Spec:
    """Parse spec text into a Spec (raises SpecSyntaxError / SpecError on bad input)."""
    if len(text.encode()) > MAX_SPEC_BYTES:
        raise SpecError(f"spec is {len(text.encode())} bytes; the limit is {MAX_SPEC_BYTES}",
                        file=file)
    text = text.removeprefix("\ufeff")       # a byte-order mark some editors write
    for number, line in enumerate(text.split("\n"), 1):
        for column, char in enumerate(line, 1):
            # a tab, and a carriage return ending its line (CRLF); a lone one ends a line
            # in Python, so it could carry spec text out of a comment in generated code
            if not hidden(char) or char == "\t" or char == "\r" and column == len(line):
                continue
            raise SpecSyntaxError(f"{hidden_kind(char)} U+{ord(char):04X} in the spec; specs "
                                  "are plain text", file=file, line=number, column=column)
    reader = Reader(text, file)
    body, _ = reader.read()
    built = Builder(reader).build(body)
    if not (built.dims or built.choices or built.blocks or built.body):
        raise SpecError("the spec is empty: it has no statements", file=file)
    built.text_hash = hashlib.sha256(text.encode()).hexdigest()
    return built


def parse_file(path: str | Path) -> Spec:
    path = Path(path)
    try:
        data = read_limited(path, MAX_SPEC_BYTES, "spec", SpecError)
        # newlines as a text file reads them: \r\n and a lone \r are \n
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as error:
        raise SpecError(f"not UTF-8 text ({error.reason} at byte {error.start})",
                        file=str(path)) from None
    except OSError as error:
        raise SpecError(f"cannot read: {error.strerror}", file=str(path)) from None
    return parse(text, str(path))
