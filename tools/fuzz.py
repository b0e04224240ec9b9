"""Fuzz every entry point that reads user input (issue 8), and judge each input.

    python tools/fuzz.py                            # 100,000 inputs over every target
    python tools/fuzz.py --target weights --inputs 5000 --seed 3
    python tools/fuzz.py --replay variant:1234 --seed 0          # one input again, verbosely

Inputs are generated, not stored: input INDEX of TARGET under SEED is always the same (its
random generator is seeded with "SEED:TARGET:INDEX"), so a crash can be replayed by its index.
Generators mix grammar-made inputs with mutations of real ones: the built-in spec and seeds,
small spec fragments, the shipped variants, and weight files written by
``tspec.execution.weights.save`` then truncated, byte-flipped or given lying headers.

Each input ends in one of:

    result   the entry point returned (a spec, a check report with or without findings, ...)
    ours     it raised one of our own errors (``spec.errors.TspecError``) with a one-line message
    crash    anything else: another exception, an error with an empty or multi-line message, a
             worker that died; for the CLI also an exit status other than 0, 1 or 2, or an exit 2
             without exactly one ``tspec: error: ...`` line
    hang     it ran past --time-limit seconds

Crashing and hanging inputs are saved under --crash-dir (TARGET-INDEX.EXT, and the traceback in
TARGET-INDEX.report); the default is tspec-fuzz-crashes in the temporary folder. The script prints
a table (target, inputs, results, ours, crashes, hangs, time) and exits 1 when anything crashed
or hung. Each worker runs under an address-space limit (--memory-limit), so an allocation a
lying header asks for fails loudly (a MemoryError is a crash) instead of going unnoticed.

Targets:

    parse    spec.language.parse on mutated and generated spec text (the built-in spec only
             through the parser), and api.read_spec on the same text as bytes in a file
    expr     one generated or mutated equation in a small spec: parse, then api.check
    check    mutated and generated small specs: parse, then api.check (every choice)
    variant  mutated and generated variant TOML files: api.load, then api.check
    set      --set values: Variant.with_settings, then api.check
    grid     --grid values: spec.grid.parse_axis, then api.grid and its text, CSV and JSON; and
             the API's mapping form (dim name -> a range, list, set or array of odd values)
    weights  tspec.execution.weights.load on truncated, flipped and lying .safetensors and
             .npz files
    cli      spec.cli.main on generated argument lists (check, shapes, diff, list, and run at
             tiny sizes)
    docs     tspec.docs.site.files (HTML and Markdown) of a small spec and variant whose every
             text (title, source, note, meanings, description, published source and note, the
             variant's file name) is hostile: HTML, LaTeX, Markdown and Mermaid syntax, links,
             control characters. Beyond ending well, every page must pass ``page_problems``:
             the HTML parsed (html.parser) holds no <script>, no element outside the pages'
             own, SVG's and MathML's, no on* attribute, no style attribute, no javascript: or
             data: URL and no link but to a sibling page, under a policy that forbids
             scripts; the Markdown parsed (markdown-it, CommonMark with tables) holds no raw
             HTML, no link but to a sibling page, no code block but Mermaid's, whose every line
             is a node or an edge with its label inside quotes, and no table row with more or
             fewer cells than its header
    output   spec.cli.main, every command, writing to a standard output that fails (a reader
             gone, a full device, at once or after some text) or cannot encode (ASCII,
             Latin-1): 141 and nothing on stderr, or 2 and one line, or the usual outcome
    printers specs whose derived dims grow to thousands of digits (powers of 40-digit dims),
             through every command that shows numbers (check, shapes, diff, --grid, docs, run)
    meanings specs whose free text holds random LaTeX ($x^$, \\frac{, ...), through tspec docs
             (Markdown and HTML pages, made in memory)
    config   Hugging Face config.json texts (GPT-2's, Llama 3.1's, Mistral's and Qwen2's at tiny
             sizes, a few fields hostile: integers of 40 to 5,001 digits, 10**400 for a
             setting, NaN, lists and tables for numbers and names, rope tables, layer_types of
             100,000 entries, nesting 5,000 deep; or the text truncated, flipped, UTF-16, past
             1 MB), through tspec.from_hf then api.check of the import, beside a checkpoint of
             the family's names (tspec.load_weights of the variant the unbroken config
             imports as), and `tspec import`, `check` and `run --weights` of its folder
    header   safetensors files (an 8-byte length, a JSON header, the data) of a tiny GPT-2 in
             Hugging Face's names and in the spec's, their headers hostile: dtypes that are
             lists, shapes of 300,000 axes or sizes past 2**63, integers of 5,001 digits,
             names numbering layer 10**20 or with a NUL, duplicate names, NaN and values past
             float16 in the data; or a shard index naming shards with a NUL, outside the
             folder or missing; with the variant's sizes against the file's (N = 10**6), through
             tspec.load_weights and `tspec run --weights`
    (config and header run with Python's warnings as errors: NumPy's overflow warning is a
    second line on stderr, which the command line does not promise)
"""

import argparse
import builtins
import contextlib
import io
import itertools
import json
import keyword
import multiprocessing
import os
import queue
import random
import re
import resource
import shutil
import signal
import struct
import symtable
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from importlib import import_module
from pathlib import Path

import numpy as np
from markdown_it import MarkdownIt

from tspec import api, cli
from tspec.analysis.grid import parse_axis
from tspec.docs import site as docs
from tspec.errors import TspecError
from tspec.execution import weights
from tspec.files import HEADERS
from tspec.importing import from_hf
from tspec.language import parser as language
from tspec.language.model import Let
from tspec.language.variant import Variant
from tspec.ops.catalogue import SETTINGS
from tspec.symbolic.expr import tokenize

STATUSES = ("result", "ours", "crash", "hang")
# Shares of --inputs per target: cheap targets get more (the mix keeps 100,000 inputs within
# about a quarter of an hour on two workers).
SHARES = {"parse": 0.126, "expr": 0.16, "check": 0.10, "variant": 0.14, "set": 0.10,
          "grid": 0.10, "weights": 0.18, "cli": 0.06, "docs": 0.01, "output": 0.002,
          "printers": 0.001, "meanings": 0.005, "shapes": 0.02, "diff": 0.01, "run": 0.004,
          "config": 0.06, "header": 0.06}
TARGETS = tuple(SHARES)
CHUNK = 50
SLOTS = 5            # per worker, shared with the parent: target, chunk start, input, its start,
#                      chunk stop


# ---------------------------------------------------------------------------------------------
# Seed material: small specs that reach every statement kind

HEADER = 'dim B "batch"\ndim T "length"\ndim d "width"\n'

FRAGMENTS = [
    HEADER + 'input X "B T d"\nparam W "d d" "weights"\nY "B T d" = relu(X @ W)\noutput Y\n',
    'spec tiny "a tiny spec"\n' + HEADER + 'dim H "heads"\ndim d_k "head width"\nlet d_k = d / H\nrequire d % H == 0\n'
    'input X "B T d"\nparam W_Q "d H*d_k"\nQ "B T H*d_k" = X @ W_Q\n'
    'Q_h[H] "B T d_k" = split_heads(Q, H)\nS_h[H] "B T T" = Q_h @ Q_h.T / sqrt(d_k)\n'
    'A_h[H] "B T T" = softmax(S_h, axis=-1)\nO "B T H*d_k" = concat_heads(A_h @ Q_h)\n',
    HEADER + 'choice act = relu | gelu "the nonlinearity"\ninput X "B T d"\n'
    'when act == relu:\n    Y "B T d" = relu(X)\nelse:\n    Y "B T d" = gelu(X)\noutput Y\n',
    HEADER + 'dim N "layers"\nblock sublayer(X "B T d") -> Z:\n    param W "d d" "weights"\n'
    '    param b "d" "bias"\n    Z "B T d" = relu(X @ W + b)\n'
    'input X "B T d"\nY "B T d" = repeat(N, sublayer, X) as layers\noutput Y\n',
    HEADER + 'dim V "vocabulary"\ndim max_len "positions" = 512\nrequire T <= max_len\n'
    'input t "B T" int "token ids"\nparam E "V d" "embedding"\nparam P "max_len d"\n'
    'X "B T d" = E[t] + P[:T]\nL "B T V" = X @ E.T\noutput L\n',
    HEADER + 'input m "B T" bool "mask"\nM "B T T" bool = padding_mask(m, T) * causal_mask(T, T)'
    '\ninput X "B T d"\nparam g "d"\nparam b "d"\nN "B T d" = layer_norm(X, g, b)\n'
    'C "B d" = first(N)\nS "B T T" = einsum("btd,bsd->bts", N, N) + log(M)\n',
    HEADER + 'choice norm = pre | post "where the norm goes"\nchoice pos = a | b | c\n'
    'input X "B T d"\nparam g "d"\nwhen norm == pre and pos != c:\n    Y "B T d" = rms_norm(X, g)\n'
    'else:\n    Y "B T d" = X * 2 - X / 3\nwhen pos in a | b:\n    Z "B T d" = Y\nelse:\n'
    '    Z "B T d" = exp(Y) ** 2\n',
    HEADER + 'dim T_past "cached"\nblock step(X "B T d") -> Y:\n'
    '    state K "B T_past d" "cache" from X\n    K_all "B T_past+T d" = concat(K, X, axis=-2)\n'
    '    update K = K_all\n    Y "B T d" = X\ninput X "B T d"\nZ "B T d" = step(X) as s\n',
    HEADER + 'dim H "heads"\ndim H_kv "groups"\nrequire H % H_kv == 0\ninput X_g[H_kv] "B T d"\n'
    'X_h[H] "B T d" = repeat_heads(X_g, H)\nR_h[H] "B T d" = rotary(X_h)\n'
    'P "T d" = sinusoidal_encoding(T, d)\nY_h[H] "B T d" = silu(R_h) + tanh(P)\n',
    ('note "only notes and dims"\nsource "nowhere"\ndim n "count" = 3\ndim m "more"\nlet m = 2*n + 1\n'
     'require m >= n\n'),
    HEADER + 'input X "B T d"\ninput P ? implied "T d" "positions"\nparam W ? implied "d d"\n'
    'Y "B T d" = X @ W + P\nreused Y as Y, X, transpose "the output and the input"\n',
    HEADER + 'choice act = relu | gelu | swiglu\nchoice bias = all | none\n'
    'block attend(X_q "B T_q d", X_kv "B T_kv d") -> O:\n    dim T_q "q"\n    dim T_kv "k"\n'
    '    param W "d d"\n    param b "d" if bias == all\n    Q "B T_q d" = act(X_q @ W + b)\n'
    '    O "B T_q d" = Q @ X_kv.T @ X_kv\nblock g(X "B T d") -> O:\n'
    '    from attend with X_q = X, X_kv = X, T_q = T, T_kv = T\n    Q "B T d" = silu(X)\n'
    'input X "B T d"\nwhen act == gelu:\n    rename g as h (Q as R)\n'
    'Y "B T d" = g(X) as g1\noutput Y\n',
]

NAMES = ["X", "Y", "Z", "W", "b", "B", "T", "d", "H", "N", "V", "t", "m", "M", "E", "P", "g",
         "X_h", "Q_h", "d_k", "d_model", "max_len", "sublayer", "step", "act", "norm", "relu",
         "softmax", "spec", "dim", "_x", "x1", "É", "ℌ", "a" * 300]


def code_names() -> list[str]:
    """Every name generated code defines or takes as an argument (each NumPy module's and its
    runtime's: imports, constants, classes, functions, their arguments and locals, and the
    keywords its calls pass), and the settings: names a spec may give its own things, which
    must not change what the code computes (issue 23)."""
    names = set(SETTINGS)
    for path in sorted((api.checkout() / "generated" / "numpy").glob("*.py")):
        text = path.read_text()
        pending = [symtable.symtable(text, path.name, "exec")]
        while pending:
            table = pending.pop()
            pending += table.get_children()
            names |= {s.get_name() for s in table.get_symbols()
                      if s.is_assigned() or s.is_imported() or s.is_parameter()
                      or s.is_namespace()}
        names |= set(re.findall(r"\b([A-Za-z]\w*)=", text))
    return sorted(name for name in names if re.fullmatch(r"[A-Za-z]\w*", name)
                  and not keyword.iskeyword(name) and not hasattr(builtins, name))


def renamed(text: str, old: str, new: str) -> str:
    """Spec text with the name ``old`` spelt ``new``, as a name and as a word inside quotes
    (a shape, a description); the text as it was where it does not tokenize."""
    try:
        tokens = tokenize(text)
    except TspecError:
        return text
    lines = text.split("\n")
    edits = []
    for token in tokens:
        if token.kind == "name" and token.text == old:
            edits.append((token.line, token.column, token.text, new))
        elif token.kind == "string" and "->" not in token.text and \
                re.search(rf"\b{old}\b", token.text):         # a shape, not an einsum
            edits.append((token.line, token.column, token.text,
                          re.sub(rf"\b{old}\b", new, token.text)))
    for line, column, was, now in sorted(edits, reverse=True):
        start = column - 1
        if lines[line - 1][start:start + len(was)] == was:
            lines[line - 1] = lines[line - 1][:start] + now + lines[line - 1][start + len(was):]
    return "\n".join(lines)


CODE_NAMES = code_names()
KEYWORDS = ["spec", "source", "note", "dim", "let", "require", "choice", "when", "else", "in",
            "and", "or", "not", "input", "param", "state", "update", "tensor", "output", "block",
            "repeat", "as", "from", "int", "bool", "float", "?", "reused", "implied", "if",
            "with", "rename"]
FUNCTIONS = ["relu", "gelu", "gelu_tanh", "silu", "tanh", "exp", "log", "sqrt", "softmax",
             "layer_norm", "rms_norm", "concat", "concat_heads", "split_heads", "repeat_heads",
             "einsum", "first", "max", "transpose", "padding_mask", "causal_mask", "rotary",
             "sinusoidal_encoding", "relative_position_bias", "unknown_fn", "print", "eval",
             "__import__", "getattr"]
PUNCTUATION = ["(", ")", "[", "]", ":", ",", "->", "==", "!=", "<=", ">=", "<", ">", "%", "//",
               "**", "*", "/", "+", "-", "@", "|", "=", ".", ".T", ".x", "...", '"', "'", "\\",
               "#", "axis=-1", "axis=", "[:T]", "[1:2]", "[::2]", "{", "}", ";", "$", "`"]
NUMBERS = ["0", "1", "2", "-1", "3", "1.5", "1e-6", "1e309", "2**64", "10**400", "0x10",
           "1_000", "00", "9" * 50, "9" * 5000, "٣", "½", "1e", ".5", "inf", "nan"]
ODD_CHARS = ["\x00", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\u2028", "\u200b", "\ufeff",
             "\u0301", "\ud7ff", "é", "𝑥", "\r", "\t", "\n", " ", "\n    ", "\n\t", "\r\n"]
SHAPES = ['"B T d"', '"B T"', '"d"', '"?"', "?", '""', '"B T d e"', '"B*T d"', '"B T 2*d"',
          '"B T d/2"', '"B T+1 d"', '"B T d_k"', '"B (T) d"', '"B T d]"', '"0"', '"-1 d"',
          '"B T 99999999999999999999999"', '"B T ' + "d " * 40 + '"']


# paths a variant's `spec =` or the command line may name that must be refused unread (issue
# 20): named pipes and a sparse terabyte in the scratch folder (Context), a device, a folder
HOSTILE_FILES = ["fifo.tspec", "huge.tspec", "/dev/zero", "."]


# ---------------------------------------------------------------------------------------------
# Text mutation

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _token(rng: random.Random) -> str:
    pool = rng.choice((NAMES, CODE_NAMES, KEYWORDS, FUNCTIONS, PUNCTUATION, NUMBERS, ODD_CHARS,
                       SHAPES))
    return rng.choice(pool)


def mutate_text(rng: random.Random, text: str, donors: list[str], count: int | None = None,
                token=_token) -> str:
    """Apply 1 to 4 random edits: spans cut, copied or replaced, tokens inserted, lines
    dropped, doubled, swapped, re-indented or spliced in from a donor, numbers and names
    replaced."""
    for _ in range(count or rng.choice((1, 1, 1, 2, 2, 3, 4))):
        lines = text.split("\n")
        op = rng.randrange(13)
        pos = rng.randint(0, len(text))
        if op == 0:                                              # cut a span
            text = text[:pos] + text[pos + rng.randint(1, 12):]
        elif op == 1:                                            # insert a token
            text = text[:pos] + token(rng) + text[pos:]
        elif op == 2:                                            # replace a span by a token
            text = text[:pos] + token(rng) + text[pos + rng.randint(1, 6):]
        elif op == 3 and len(lines) > 1:                         # drop a line
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        elif op == 4:                                            # double a line
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op == 5 and len(lines) > 1:                         # swap two lines
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif op == 6:                                            # re-indent a line
            i = rng.randrange(len(lines))
            lines[i] = rng.choice(["    ", "  ", "\t", "        ", ""]) + lines[i].lstrip(
                " " if rng.random() < 0.5 else "")
            text = "\n".join(lines)
        elif op == 7 and donors:                                 # splice a donor's line in
            donor = rng.choice(donors).split("\n")
            lines.insert(rng.randint(0, len(lines)), rng.choice(donor))
            text = "\n".join(lines)
        elif op == 8:                                            # replace a number
            found = list(_NUMBER.finditer(text))
            if found:
                m = rng.choice(found)
                text = text[:m.start()] + rng.choice(NUMBERS) + text[m.end():]
        elif op == 9:                                            # replace a name by another
            found = list(_IDENT.finditer(text))
            if found:
                m = rng.choice(found)
                other = rng.choice(found).group() if rng.random() < 0.7 else rng.choice(NAMES)
                text = text[:m.start()] + other + text[m.end():]
        elif op == 10:                                           # an odd character
            text = text[:pos] + rng.choice(ODD_CHARS) + text[pos:]
        elif op == 11:                                           # truncate
            text = text[:pos]
        else:                                                    # copy a span elsewhere
            start = rng.randint(0, len(text))
            span = text[start:start + rng.randint(1, 40)]
            text = text[:pos] + span * rng.randint(1, 3) + text[pos:]
    return text


# ---------------------------------------------------------------------------------------------
# Grammar: random expressions and small specs

TENSORS = {"X": "B T d", "W": "d d", "b": "d", "M": "B T T", "v": "T", "X_h": "B T d"}


def gen_dim_expr(rng: random.Random, depth: int = 0) -> str:
    if depth > 2 or rng.random() < 0.5:
        return rng.choice(["B", "T", "d", "H", "1", "2", "0", "d_k", "q", "3"])
    op = rng.choice(["+", "-", "*", "/", "%", "//", "**"])
    return f"{gen_dim_expr(rng, depth + 1)}{op}{gen_dim_expr(rng, depth + 1)}"


def gen_expr(rng: random.Random, depth: int = 0) -> str:
    """A random tensor expression over X "B T d", W "d d", b "d", M "B T T", v "T" and the
    family X_h[H] "B T d"."""
    if depth > 3 or rng.random() < 0.3:
        leaf = rng.random()
        if leaf < 0.7:
            return rng.choice(list(TENSORS))
        if leaf < 0.85:
            return rng.choice(NUMBERS[:10])
        return rng.choice(["sqrt(d)", "sqrt(H)", "t", "Y", "X.T", "W.T", "E[t]", "X[:T]",
                           "W[1:d]", "X_h.T"])
    kind = rng.randrange(6)
    if kind == 0:
        op = rng.choice(["+", "-", "*", "/", "@", "**"])
        return f"{gen_expr(rng, depth + 1)} {op} {gen_expr(rng, depth + 1)}"
    if kind == 1:
        return f"({gen_expr(rng, depth + 1)})"
    if kind == 2:
        return f"-{gen_expr(rng, depth + 1)}"
    if kind == 3:
        name = rng.choice(FUNCTIONS)
        args = [gen_expr(rng, depth + 1) for _ in range(rng.choice([0, 1, 1, 1, 2, 3]))]
        if rng.random() < 0.3:
            args.append(f"axis={rng.choice(['-1', '0', '2', '-4', '5', 'd', '1.5', '-0'])}")
        if rng.random() < 0.15:
            args.append(rng.choice(["H", "T", "d", "2*H", "T+1"]))
        return f"{name}({', '.join(args)})"
    if kind == 4:
        pattern = "".join(rng.choice("btdsh,->.") for _ in range(rng.randint(0, 12)))
        args = ", ".join(gen_expr(rng, depth + 1) for _ in range(rng.randint(0, 3)))
        return f'einsum("{pattern}"{", " if args else ""}{args})'
    base = gen_expr(rng, depth + 1)
    index = rng.choice([":T", "1:T", ":d", f":{gen_dim_expr(rng)}", "t", "0", "::2", ":"])
    return f"{base}[{index}]"


def expr_spec(rng: random.Random) -> str:
    """A small spec around one generated equation (sometimes two, the second using Y)."""
    header = HEADER + 'dim H "heads"\ndim q "q"\ninput X "B T d"\nparam W "d d"\nparam b "d"\n' \
        'input M "B T T"\ninput v "T"\ninput X_h[H] "B T d"\ninput t "B T" int\n' \
        'param E "d d"\n'
    shape = rng.choice(['"B T d"', '"B T d"', '"B T T"', '"T"', '"d d"', '"d"', '"B T"']
                       if rng.random() < 0.8 else SHAPES)
    family = "[H]" if rng.random() < 0.15 else ""
    text = f"Y{family} {shape} = {gen_expr(rng)}\n"
    if rng.random() < 0.3:
        text += f'Z "B T d" = {gen_expr(rng).replace("X", "Y", 1)}\n'
    if rng.random() < 0.1:
        text += f"require {gen_dim_expr(rng)} {rng.choice(['==', '<=', '>', '!='])} " \
                f"{gen_dim_expr(rng)}\n"
    if rng.random() < 0.1:
        text += f"let q = {gen_dim_expr(rng)}\n"
    return header + text


def gen_spec(rng: random.Random) -> str:
    """A random small spec: dims, lets, requires, choices, tensors, equations, blocks."""
    dims = ["B", "T", "d"] + rng.sample(["H", "N", "V", "d_k", "max_len", "q"], rng.randint(0, 3))
    lines = []
    if rng.random() < 0.4:
        lines.append(f'spec {rng.choice(NAMES)} "{rng.choice(["t", "", "é"])}"')
    for dim in dims:
        bound = f" = {rng.choice(NUMBERS[:6])}" if rng.random() < 0.1 else ""
        lines.append(f'dim {dim} "{dim}"{bound}')
    choices = []
    for name in rng.sample(["c", "arch", "norm"], rng.randint(0, 2)):
        options = rng.sample(["a", "b", "c", "pre", "post"], rng.randint(1, 3))
        choices.append((name, options))
        lines.append(f"choice {name} = {' | '.join(options)}")
    for _ in range(rng.randint(0, 2)):
        lines.append(f"let {rng.choice(dims + ['k'])} = {gen_dim_expr(rng)}")
    for _ in range(rng.randint(0, 2)):
        lines.append(f"require {gen_dim_expr(rng)} {rng.choice(['==', '<=', '<', '>='])} "
                     f"{gen_dim_expr(rng)}")
    for name, shape in TENSORS.items():
        if rng.random() < 0.8:
            role = rng.choice(["input", "input", "param", "tensor"])
            family = "[H]" if name.endswith("_h") else ""
            lines.append(f'{role} {name}{family} "{shape}"')
    body = [f'Y "{rng.choice(list(TENSORS.values()))}" = {gen_expr(rng)}']
    if choices and rng.random() < 0.6:
        name, options = rng.choice(choices)
        op = rng.choice(["==", "!=", "in"])
        value = " | ".join(options) if op == "in" else rng.choice(options + ["zz"])
        body = [f"when {name} {op} {value}:"] + ["    " + line for line in body]
        if rng.random() < 0.5:
            body += ["else:", f'    Y "B T d" = {gen_expr(rng)}']
    lines += body
    if rng.random() < 0.4:
        lines += ['block f(A "B T d") -> O:', '    param U "d d"', f"    O = {gen_expr(rng)}",
                  rng.choice(['Z "B T d" = f(X) as f1', 'Z "B T d" = repeat(N, f, X)',
                              'Z = f(X, X)', 'Z "B T d" = repeat(2, f, X) as r',
                              'Z "B T d" = f(Y) as f']).replace("N", rng.choice(dims))]
    if rng.random() < 0.5:
        lines.append("output " + ", ".join(rng.sample(["Y", "Z", "X", "Q"], rng.randint(1, 2))))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# TOML

DIM_NAMES = ["d_model", "H", "d_ff", "N", "V", "max_len", "T", "B", "d_k", "T_dec", "H_kv",
             "V_type", "T_past", "T_new", "d", "n", "zz"]
CHOICE_VALUES = {"arch": ["encoder_decoder", "encoder_only", "decoder_only"],
                 "norm": ["pre", "post"], "activation": ["relu", "gelu", "swiglu"],
                 "positional": ["sinusoidal", "learned", "rotary", "relative"],
                 "head_dims": ["split", "free"], "decoding": ["full", "step"],
                 "act": ["relu", "gelu"], "key_value_heads": ["all", "grouped"]}


def toml_value(rng: random.Random, depth: int = 0) -> str:
    kind = rng.randrange(14 if depth < 2 else 10)
    if kind == 0:
        return str(rng.choice([1, 2, 8, 64, 512, 0, -1, 2 ** 63 - 1, 10 ** 40, 10 ** 39 + 1]))
    if kind == 1:
        return rng.choice(["1e-6", "0.0", "-1.5", "inf", "-inf", "nan", "1e400", "5e-324",
                           "1_000", "0x1F", "0o17", "0b101", "+3", "6.0"])
    if kind == 2:
        return rng.choice(["true", "false"])
    if kind == 3:
        return json.dumps(rng.choice(["transformer", "seed_000", "small.tspec", "base",
                                      "encoder_only", "pre", "relu", "", "x.toml",
                                      "../small.tspec", "/", "/dev/null", "/proc/self/status",
                                      *HOSTILE_FILES,
                                      "nope", "a" * 300, "a/" * 200 + "b", "é", "\u0000",
                                      "\u202e", "\t", "transformer\n", "C:\\x"]))
    if kind == 4:
        return rng.choice(["1979-05-27T07:32:00Z", "1979-05-27", "07:32:00",
                           "1979-05-27T00:32:00.999999-07:00"])
    if kind == 5:
        return "'''multi\nline'''" if rng.random() < 0.5 else '"""a\\\n  b"""'
    if kind == 6:
        return "'literal \\n'"
    if kind == 7:
        return str(rng.randint(1, 5000))
    if kind == 8:
        return json.dumps(rng.choice([v for vs in CHOICE_VALUES.values() for v in vs]))
    if kind == 9:
        return "9" * rng.choice([41, 60, 4301, 5000])
    if kind in (10, 11):
        return "[" + ", ".join(toml_value(rng, depth + 1) for _ in range(rng.randint(0, 3))) + "]"
    return "{" + ", ".join(f"{rng.choice(DIM_NAMES)} = {toml_value(rng, depth + 1)}"
                           for _ in range(rng.randint(0, 3))) + "}"


def gen_toml(rng: random.Random) -> str:
    """A random variant file: known and unknown keys and tables, right and wrong values."""
    lines = []
    if rng.random() < 0.9:
        spec = rng.choice(['"transformer"', '"small.tspec"', '"seed_000"', '"small.tspec"'])
        lines.append(f"spec = {spec if rng.random() < 0.8 else toml_value(rng)}")
    if rng.random() < 0.5:
        lines.append(f"description = {toml_value(rng) if rng.random() < 0.3 else chr(34) + 'd' + chr(34)}")
    if rng.random() < 0.1:
        lines.append(f"{rng.choice(['extra', 'dim', 'Spec', 'published'])} = {toml_value(rng)}")
    for section in rng.sample(["dims", "choices", "settings", "published", "other"],
                              rng.randint(0, 4)):
        header = f"[{section}]" if rng.random() < 0.9 else rng.choice(
            [f"[[{section}]]", f"[{section}.x]", f'["{section}"]', f"[ {section} ]"])
        lines.append(header)
        used: set[str] = set()
        for _ in range(rng.randint(0, 5)):
            if section == "dims":
                key = rng.choice(DIM_NAMES)
                value = str(rng.choice([1, 2, 4, 8, 16, 64, 512])) if rng.random() < 0.7 \
                    else toml_value(rng)
            elif section == "choices":
                key = rng.choice(list(CHOICE_VALUES) + ["nope", "d_model"])
                value = json.dumps(rng.choice(CHOICE_VALUES.get(key, ["x"]))) \
                    if rng.random() < 0.7 else toml_value(rng)
            elif section == "settings":
                key = rng.choice(list(SETTINGS) + ["eta"])
                value = toml_value(rng) if rng.random() < 0.6 else "1e-6"
            elif section == "published":
                key = rng.choice(["parameters", "source", "note", "count"])
                value = toml_value(rng) if rng.random() < 0.5 else \
                    ("123" if key == "parameters" else '"somewhere"')
            else:
                key, value = rng.choice(DIM_NAMES), toml_value(rng)
            if key in used and rng.random() < 0.9:
                continue
            used.add(key)
            if rng.random() < 0.1:
                key = json.dumps(key + rng.choice(["", " ", ".x", "\u00e9"]))
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def _toml_token(rng: random.Random) -> str:
    return rng.choice([toml_value(rng), "[", "]", "[[", "=", '"', "'", "#", ",", "{", "}",
                       "\n", ".", "dims", "choices", "spec", "\\u0000", "\\", "\x00", "\ufeff",
                       "\r", "d_model", "H", "N"])


# ---------------------------------------------------------------------------------------------
# --set and --grid values

def gen_setting(rng: random.Random, names: list[str]) -> str:
    r = rng.random()
    if r < 0.05:
        return rng.choice(["", "=", "==", "a=b=c", "noequals", " = ", "=5", "x=", "\x00=1"])
    name = rng.choice(names) if rng.random() < 0.85 else rng.choice(NAMES + ["1x", "a-b", ""])
    if name in CHOICE_VALUES and rng.random() < 0.6:
        value = rng.choice(CHOICE_VALUES[name] + ["nope", "PRE", " pre "])
    elif name in SETTINGS and rng.random() < 0.6:
        value = rng.choice(["1e-6", "0", "-1", "nan", "inf", "1e309", "1_0", "٣", " 5 ",
                            "0x10", "1e-400", "10000.0", "True", ""])
    else:
        value = rng.choice(["1", "2", "4", "8", "64", "512", "0", "-1", "1.5", "1_024",
                            "9" * 40, "9" * 41, "9" * 5000, "١٢", "²", "１", "+3", "0003",
                            " 8", "8 ", "", "8e2", "_1", "1__0", "pre", "∞", "8\n9", "\t8",
                            "8\r"])
    separator = "=" if rng.random() < 0.9 else rng.choice([" = ", "==", "= ", ":"])
    return f"{name}{separator}{value}"


def gen_axis(rng: random.Random, names: list[str]) -> str:
    r = rng.random()
    if r < 0.05:
        return rng.choice(["", "=", "d_model", "d_model=", "=1:2:3", "a=b=c", "H=:", "H=::",
                           "H=1:2", "H=1:2:3:4", "H=,", "H=1,,2", "H=1:8:0", "H=8:1:1"])
    name = rng.choice(names) if rng.random() < 0.9 else rng.choice(NAMES + ["1x", ""])

    def number():
        return rng.choice(["1", "2", "4", "8", "16", "64", "128", "256", "0", "-1", "1.5",
                           "9" * 40, "9" * 41, "1_0", "٣", " 2 ", "", "x", "10**3", "1\n2",
                           "2\t", "\x0b3"])
    if r < 0.5:
        start = rng.choice([1, 2, 4, 8, 64, 256])
        stop = start + rng.choice([0, 1, 7, 64, 256, 1000, 10 ** 6, 10 ** 12])
        step = rng.choice([1, 2, 7, 64, 1000])
        parts = [str(start), str(stop), str(step)]
        if rng.random() < 0.3:
            parts[rng.randrange(3)] = number()
        values = ":".join(parts)
    elif r < 0.9:
        count = rng.randint(1, 6)
        values = ",".join(str(rng.choice([1, 2, 3, 4, 8, 12, 16, 64])) if rng.random() < 0.85
                          else number() for _ in range(count))
    else:
        values = number()
    return f"{name}={values}"


def gen_values(rng: random.Random) -> list:
    """An API grid axis's values, described as JSON (made Python by ``grid_values``)."""
    kind = rng.choice(["range", "range", "list", "list", "text", "array", "set", "tuple"])
    if kind == "range":
        start = rng.choice([1, 2, 4, 8, 64, 0, -4, 10 ** 40])
        stop = start + rng.choice([0, 1, 8, 64, 1000, -8, 10 ** 7, 10 ** 50])
        return ["range", start, stop, rng.choice([1, 2, 8, 64, -1, -4])]
    if kind == "text":
        return ["text", gen_axis(rng, ["H"]).partition("=")[2]]
    values = [rng.choice([1, 2, 4, 8, 16, 64]) if rng.random() < 0.8 else
              rng.choice([0, -1, 1.5, 2.0, True, None, "8", 10 ** 40, 10 ** 39, 2 ** 63])
              for _ in range(rng.randint(0, 5))]
    return [kind, values]


def grid_values(described: list):
    kind, *rest = described
    if kind == "range":
        return range(*rest)
    if kind == "text":
        return rest[0]
    values = rest[0]
    if kind == "array":
        try:
            return np.array(values)
        except (ValueError, OverflowError):
            return values
    return {"set": set, "tuple": tuple}.get(kind, list)(
        v for v in values if kind != "set" or v is None or not isinstance(v, list))


# ---------------------------------------------------------------------------------------------
# Weight files

ST_DTYPES = ["F32", "F64", "F16", "BF16", "I64", "I32", "I8", "U8", "BOOL", "F8_E4M3",
             "F8_E5M2", "C64", "F4", "E8M0", "XX", "", 5, None]


def _safetensors(header, data: bytes, length: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def _split_safetensors(blob: bytes):
    (length,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + length]), blob[8 + length:]


def _npy(header: str | bytes, data: bytes, version: bytes = b"\x01\x00") -> bytes:
    text = header.encode("latin1") if isinstance(header, str) else header
    pad = (-(len(text) + 11)) % 64
    text = text + b" " * pad + b"\n"
    size = struct.pack("<H" if version[0] == 1 else "<I", len(text))
    return b"\x93NUMPY" + version + size + text + data


def _zip(members: list[tuple[str, bytes]], method=zipfile.ZIP_STORED) -> bytes:
    """A zip of the members, with fixed dates (the same bytes every time)."""
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", method) as archive:
        warnings.simplefilter("ignore")                  # duplicate names: wanted here
        for name, data in members:
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data, method)
    return out.getvalue()


def _npz_members(blob: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def _array_bytes(array, allow_pickle=False) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=allow_pickle)
    return out.getvalue()


def _flip(rng: random.Random, blob: bytes, span: tuple[int, int] | None = None) -> bytes:
    data = bytearray(blob)
    start, stop = span or (0, len(data))
    for _ in range(rng.randint(1, 8)):
        if stop > start:
            i = rng.randrange(start, stop)
            data[i] = rng.randrange(256) if rng.random() < 0.5 else data[i] ^ (1 << rng.randrange(8))
    return bytes(data)


def gen_safetensors(rng: random.Random, valid: bytes) -> bytes:
    header, data = _split_safetensors(valid)
    names = [n for n in header if n != "__metadata__"]
    op = rng.randrange(12)
    if op == 0:
        return valid[:rng.randint(0, len(valid))]
    if op == 1:
        return _flip(rng, valid, (0, 8 + len(json.dumps(header))) if rng.random() < 0.7 else None)
    if op == 2:                                   # an absurd or wrong header length
        length = rng.choice([0, 1, 7, 2 ** 63, 2 ** 64 - 1, 2 ** 40, 100_000_001,
                             len(json.dumps(header)) + rng.randint(-20, 20)])
        return _safetensors(header, data, max(0, length))
    if op == 3:                                   # an entry lies
        name = rng.choice(names)
        entry = header[name]
        what = rng.randrange(6)
        if what == 0:
            entry["dtype"] = rng.choice(ST_DTYPES)
        elif what == 1:
            entry["shape"] = rng.choice([[], [0], [-1], [2 ** 40, 2 ** 40], [10 ** 30],
                                         [1] * 40, "8", [1.5], None, [[2]],
                                         list(reversed(entry["shape"]))])
        elif what == 2:
            a, b = entry["data_offsets"]
            entry["data_offsets"] = rng.choice([[b, a], [a, b + 4], [a, 2 ** 63], [-1, b],
                                                [0, len(data)], [a, a], [a], [a, b, 0],
                                                None, [str(a), b], [a + 0.5, b]])
        elif what == 3:
            del entry[rng.choice(list(entry))]
        elif what == 4:
            entry[rng.choice(["extra", "dtype", "shape"])] = {"x": 1}
        else:                                     # shape and offsets agree, but the wrong shape
            count = int(np.prod(entry["shape"]))
            entry["shape"] = [count] if len(entry["shape"]) != 1 else [1, count]
        return _safetensors(header, data)
    if op == 4:                                   # renamed, dropped or extra tensors
        name = rng.choice(names)
        entry = header.pop(name)
        if rng.random() < 0.6:
            header[rng.choice([name + ".x", "x", "", "a" * 300, name.upper(), "\u0000"])] = entry
        return _safetensors(header, data)
    if op == 5:                                   # metadata of the wrong kind
        header["__metadata__"] = rng.choice([{"a": 1}, [1], "x", None, {"a": "b"},
                                             {"format": "pt"}])
        return _safetensors(header, data)
    if op == 6:                                   # a header that is not the right JSON
        text = rng.choice([b"[]", b"1", b"null", b'"x"', b"{", b"{}", b"\xff\xfe{}",
                           b"\xef\xbb\xbf{}", b"[" * 200 + b"]" * 200,
                           b'{"a":' * 150 + b"1" + b"}" * 150, b'{"a": {"a": 1}}',
                           json.dumps(header).encode() + b"  \x00",
                           json.dumps(header).encode().replace(b'"F32"', b'"F64"')])
        return _safetensors(text, data)
    if op == 7:                                   # the same dtype everywhere, but another one
        dtype = rng.choice(["F64", "F16", "BF16", "I32", "U8", "F8_E4M3"])
        for name in names:
            header[name]["dtype"] = dtype
        return _safetensors(header, data)
    if op == 8:                                   # data added or removed at the end
        return valid + bytes(rng.randint(1, 64)) if rng.random() < 0.5 else valid[:-4]
    if op == 9:                                   # everything in one tensor of huge shape
        big = {"E": {"dtype": "F32", "shape": [2 ** 31, 2 ** 31], "data_offsets": [0, 2 ** 64 - 1]}}
        return _safetensors(big, data[:64])
    if op == 10:                                  # duplicate key in the JSON text
        text = json.dumps(header)
        first = json.dumps(names[0])
        text = text[:-1] + f", {first}: {json.dumps(header[names[0]])}}}"
        return _safetensors(text.encode(), data)
    return _flip(rng, valid)


def gen_npz(rng: random.Random, valid: bytes, shapes: dict) -> bytes:
    members = _npz_members(valid)
    op = rng.randrange(14)
    i = rng.randrange(len(members))
    name, member = members[i]
    shape = shapes[name[:-4]]
    if op == 0:
        return valid[:rng.randint(0, len(valid))]
    if op == 1:
        return _flip(rng, valid)
    if op == 2:                                   # a wrong-shape or wrong-dtype array
        array = rng.choice([np.zeros((2, 3), np.float32), np.zeros(shape, np.int64),
                            np.zeros(shape, np.float64), np.zeros(shape, np.float16),
                            np.zeros(shape, bool), np.zeros(shape, np.complex64),
                            np.zeros(shape, "U3"), np.zeros(shape, [("a", "f4")]),
                            np.float32(1.0), np.asfortranarray(np.zeros(shape, np.float32)),
                            np.zeros((0,) + tuple(shape), np.float32)])
        members[i] = (name, _array_bytes(array))
    elif op == 3:                                 # an object array (a pickle inside)
        array = np.empty(shape, object)
        array.fill(1.0)
        members[i] = (name, _array_bytes(array, allow_pickle=True))
    elif op == 4:                                 # a lying .npy header
        count = int(np.prod(shape))
        fake = rng.choice([(10 ** 12,), (2 ** 31, 2 ** 31), (3_000_000_000,), (-1,),
                           (count + 1,), (count - 1,), tuple(shape)[::-1], (), (0,)])
        descr = rng.choice(["'<f4'", "'<f8'", "'|O'", "'<i8'", "'V4'", "[('a', '<f4')]",
                            "('<f4', (100000000,))", "'<U100000000'", "'bogus'", "1"])
        header = rng.choice([
            f"{{'descr': {descr}, 'fortran_order': False, 'shape': {fake!r}, }}",
            f"{{'descr': '<f4', 'fortran_order': False, 'shape': {fake!r}, }}",
            "{'descr': '<f4', 'fortran_order': 'yes', 'shape': (2,), }",
            "{'descr': '<f4', 'shape': (2,), }", "[1, 2]", "{'descr': '<f4',",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (" + "(" * 150 + ")" * 150 + "), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1.5,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': __import__('os'), }"])
        version = rng.choice([b"\x01\x00", b"\x02\x00", b"\x03\x00", b"\x09\x09"])
        members[i] = (name, _npy(header, member[-4 * count:], version))
    elif op == 5:                                 # a member that is no .npy file
        members[i] = (rng.choice([name, name[:-4], name[:-4] + ".txt", "dir/", name]),
                      rng.choice([b"", b"hello", member[:10], b"\x93NUMPY"]))
    elif op == 6:                                 # a member dropped, doubled or added
        if rng.random() < 0.4:
            del members[i]
        elif rng.random() < 0.5:
            members.append((name, member))
        else:
            members.append((rng.choice(["extra.npy", "x/y.npy", "../up.npy", "/abs.npy",
                                        ".npy", "E.npy.npy"]), member))
    elif op == 7:                                 # a plain .npy file, or no zip at all
        return rng.choice([_array_bytes(np.zeros(shape, np.float32)), b"",
                           bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))),
                           b"PK\x03\x04", b"PK\x05\x06" + bytes(18), b"\x93NUMPY\x01\x00"])
    elif op == 8:                                 # compressed members, some bytes flipped
        packed = _zip(members, zipfile.ZIP_DEFLATED)
        return _flip(rng, packed) if rng.random() < 0.7 else packed
    elif op == 9:                                 # a small zip bomb: 8 MB of zeros
        members[i] = (name, _npy("{'descr': '<f4', 'fortran_order': False, "
                                 "'shape': (2000000,), }", bytes(8_000_000)))
        return _zip(members, zipfile.ZIP_DEFLATED)
    elif op == 10:                                # a lying size in the zip's own records
        data = bytearray(_zip(members))
        at = data.rfind(b"PK\x01\x02")
        if at >= 0:
            struct.pack_into("<I", data, at + 24, rng.choice([0, 2 ** 32 - 1, 12345]))
        return bytes(data)
    elif op == 11:                                # another compression, or encryption claimed
        packed = bytearray(_zip(members))
        at = packed.find(b"PK\x03\x04")
        method = rng.choice([12, 14, 99, 1, 8])
        struct.pack_into("<H", packed, at + 8, method)
        central = packed.rfind(b"PK\x01\x02")
        if central >= 0:
            struct.pack_into("<H", packed, central + 10, method)
            if rng.random() < 0.3:
                struct.pack_into("<H", packed, central + 8, 1)      # encrypted
        return bytes(packed)
    elif op == 12:                                # a 0-d or huge-rank array
        members[i] = (name, _array_bytes(rng.choice([np.float32(2), np.zeros((1,) * 32,
                                                                              np.float32)])))
    else:
        members = [(n, _flip(rng, m, (0, 128))) for n, m in members]
    return _zip(members)


# ---------------------------------------------------------------------------------------------
# Docs pages: hostile text in every place a spec or variant holds text, and the pages' oracle

DOCS_TEXT = [
    "<script>alert(document.domain)</script>", "<img src=x onerror=alert(1)>",
    "<svg onload=alert(1)>", "<a href='javascript:alert(1)'>x</a>", "javascript:alert(1)",
    "[x](javascript:alert(1))", "![x](data:text/html;base64,PHNjcmlwdD4=)",
    "<javascript:alert(1)>", "[x]: javascript:alert(1)", "[x]", "x](javascript:y)",
    r"$\text{<script>alert(document.domain)</script>}$", r"$\href{javascript:alert(1)}{x}$",
    r"$\style{background:url(x)}{y}$", r"$\class{x}{y}$", r"$\cssId{x}{y}$", r"$\color{red}{x}$",
    r"$\hspace{1em' onload='x}$", r"$\require{x}$", r"$\unicode{60}$", r"$\text{&#x3c;b&#x3e;}$",
    r"$\mathrm{</mtext><script>}$", "$x^$", r"$\frac{$", r"$\begin{matrix}$", "$a<b$",
    "$|x| \\| y$", "$a`b$", "$" + "{" * 300 + "$", "$" + "x^{" * 300 + "$", "`code|<pipe>`",
    "```", "```mermaid", "~~~", "|", "||", "\\|", "\\", "$", "$$", "&lt;script&gt;",
    "&#60;script&#62;", '%%{init: {"securityLevel": "loose"}}%%', "'", "#", "# heading",
    "- item", "1. item", "---", "> quote", "    indented", "{{ x }}", "{% raw %}", "]]>",
    "<!--", "-->", "<![CDATA[", "</title><script>", "</style><script>", "</math>", "é",
    "\U0001d465", "\u202e", "x" * 3000, '"', "\x1b[31m", "\n", "\t", "plain words",
]
DOCS_NAMES = ["v", "<script>alert(1)<", "javascript:alert(1)", "a|b", "a`b", "x](javascript:y)",
              "a b", "#x", "-x", "1. x", "%%", "é", "&amp;", "a\\nb", "a\u202eb", "$x$"]
DOCS_SPEC = """spec tiny "{0}"
source "{1}"
note "{2}"
dim B "{3}"
dim T "{4}"
dim d_model "{5}"
dim H "{11}"
require d_model % H == 0
block f(X "B T d_model") -> Y:
    param W "d_model d_model" "{6}"
    Y "B T d_model" "{7}" = {10}
input X "B T d_model" "{8}"
Y "B T d_model" "{9}" = f(X) as first
output Y
"""


def docs_text(rng: random.Random) -> str:
    """One hostile text: a few pieces of the corpus and plain words, sometimes mutated."""
    pieces = [rng.choice(DOCS_TEXT) if rng.random() < 0.6 else rng.choice(NAMES[:20])
              for _ in range(rng.choice((1, 1, 2, 3, 4)))]
    text = rng.choice((" ", "")).join(pieces)
    if rng.random() < 0.2:
        text = mutate_text(rng, text, DOCS_TEXT, 1)
    return text


def gen_docs(rng: random.Random) -> dict:
    """A spec whose every text is hostile (with a printable, quote-free one mostly, so that
    the spec parses), and one or two variants of it with a hostile description, published text
    and file name (two: the index compares them; d_model and H: it shows a grid around one)."""
    def text():
        value = docs_text(rng)
        if rng.random() < 0.9:
            value = "".join(c for c in value if c.isprintable() and c != '"')
        return value
    dims = {"d_model": 256, "H": 8}
    if rng.random() < 0.25:                 # a fragment of another shape, its dims' meanings
        spec = re.sub(r'^(dim \w+) "[^"]*"', lambda m: f'{m.group(1)} "{text()}"',
                      rng.choice(FRAGMENTS), flags=re.MULTILINE)
        if not spec.startswith("spec "):
            spec = f'spec t "{text()}"\nsource "{text()}"\nnote "{text()}"\n' + spec
        dims = {"d": 4} if re.search(r"^dim d ", spec, re.MULTILINE) else {}
    else:
        equation = rng.choice(["X @ W"] * 6 + ['einsum("btd,de->bte", X, W)',
                                               'einsum("<b>,de->bte", X, W)'])
        spec = DOCS_SPEC.format(*(text() for _ in range(10)), equation, text())
    spec_name = (rng.choice(DOCS_NAMES) if rng.random() < 0.3 else "spec") + ".tspec"
    variants = {}
    for number in range(rng.choice((1, 1, 2))):
        variant = {"spec": spec_name, "description": text(),
                   "dims": {k: v * (number + 1) for k, v in dims.items()}}
        if not dims:
            del variant["dims"]
        if rng.random() < 0.7:
            variant["published"] = {"parameters": 16, "source": text(), "note": text()}
        name = rng.choice(DOCS_NAMES) if rng.random() < 0.5 else f"v{number}"
        variants[name] = _toml(variant)
    return {"spec": spec, "spec_name": spec_name, "variants": variants}


def _toml(table: dict, prefix: str = "") -> str:
    """A small TOML document of strings, integers and tables (strings as JSON: TOML reads
    the escapes json.dumps writes)."""
    lines, tables = [], []
    for key, value in table.items():
        if isinstance(value, dict):
            tables.append(f"\n[{prefix}{key}]\n" + _toml(value))
        else:
            lines.append(f"{key} = {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines) + "\n" + "".join(tables)


def run_docs(data: dict, ctx) -> dict:
    folder = ctx.fresh("")
    folder.mkdir()
    try:
        (folder / data["spec_name"]).write_text(data["spec"], encoding="utf-8",
                                                errors="surrogatepass")
        paths = []
        for name, text in data["variants"].items():
            paths.append(folder / f"{name}.toml")
            paths[-1].write_text(text, encoding="utf-8", errors="surrogatepass")
        pages = docs.files([api.load(path) for path in paths])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for name, text in pages.items():
        problems = page_problems(name, text)
        if problems:
            raise Crash(f"{name}: {problems[0]}")
    return pages


PAGE_TAGS = frozenset(["html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4",
                       "p", "code", "em", "table", "tr", "th", "td", "a", "ul", "li", "figure",
                       "section"])
SVG_TAGS = frozenset(["svg", "title", "defs", "marker", "path", "line", "text", "rect"])
MATHML_TAGS = frozenset(["math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msub",
                         "msup", "msubsup", "mfrac", "msqrt", "mroot", "mstyle", "mpadded",
                         "mphantom", "menclose", "mover", "munder", "munderover", "mtable", "mtr",
                         "mtd"])
POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_SIBLING = re.compile(r"[A-Za-z0-9%._~-]+\.(md|html)\Z")
_MERMAID_LINE = re.compile(r'flowchart TD|    n\d+(\(\["[^"]*"\]\)|\[\["[^"]*"\]\]|\["[^"]*"\])'
                           r'|    n\d+ -->\|"[^"]*"\| n\d+')
_MERMAID_LABEL = re.compile(r'"([^"]*)"')
_LABEL_CHARACTERS = re.compile(r"[\w :=()\[\],@+*\-./#;]*\Z")


def page_problems(name: str, text: str) -> list[str]:
    """What is wrong with a docs page made from hostile text ([] when nothing): see the
    module's docstring, target docs."""
    return _html_problems(text) if name.endswith(".html") else _markdown_problems(text)


class _PageParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems, self.policies = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in PAGE_TAGS | SVG_TAGS | MATHML_TAGS:
            self.problems.append(f"element <{tag}>")
        for key, value in attrs:
            value = value or ""
            bare = re.sub(r"[\x00-\x20]", "", value).lower()
            if key.startswith("on") or key == "style":
                self.problems.append(f"attribute {key}={value!r} on <{tag}>")
            elif bare.startswith(("javascript:", "data:", "vbscript:")) or \
                    "url(" in bare and bare != "url(#arrow)":
                self.problems.append(f"a URL in {key}={value!r} on <{tag}>")
            elif key in ("href", "src", "xlink:href", "action", "formaction") and \
                    not (tag == "a" and key == "href" and _SIBLING.match(value)):
                self.problems.append(f"a link {key}={value!r} on <{tag}>")
            elif key == "http-equiv" and value.lower() == "content-security-policy":
                self.policies.append(dict(attrs).get("content"))
            elif key == "http-equiv":
                self.problems.append(f"a <meta http-equiv={value!r}>")

    handle_startendtag = handle_starttag


def _html_problems(text: str) -> list[str]:
    parser = _PageParser()
    parser.feed(text)
    parser.close()
    if parser.policies != [POLICY]:
        parser.problems.append(f"the policies {parser.policies!r}, not one forbidding scripts")
    return parser.problems


def _markdown_problems(text: str) -> list[str]:
    text = text.removeprefix(HEADERS[".md"])    # tspec's own first line: the one comment allowed
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    md.validateLink = lambda url: True          # every link shown, to be judged here
    lines, problems, header, in_head = text.split("\n"), [], 0, False
    for token in md.parse(text):
        for inner in [token, *(token.children or [])]:
            kind = inner.type
            if kind in ("html_block", "html_inline", "code_block", "image"):
                problems.append(f"{kind} {inner.content!r:.80}")
            elif kind == "link_open" and not _SIBLING.match(str(inner.attrs.get("href"))):
                problems.append(f"a link to {inner.attrs.get('href')!r}")
            elif kind == "fence":
                problems += _mermaid_problems(inner)
            elif kind in ("thead_open", "thead_close"):
                in_head = kind == "thead_open"
            elif kind == "tr_open":
                cells = _row_cells(lines[inner.map[0]])
                if in_head:
                    header = cells
                elif cells != header:
                    problems.append(f"a row of {cells} cells under {header}: "
                                    f"{lines[inner.map[0]]!r:.80}")
    return problems


def _row_cells(line: str) -> int:
    """The cells of a table's row as markdown-it splits them."""
    columns = import_module("markdown_it.rules_block.table").escapedSplit(line.strip())
    return len(columns) - (columns[:1] == [""]) - (len(columns) > 1 and columns[-1] == "")


def _mermaid_problems(fence) -> list[str]:
    if fence.info != "mermaid":
        return [f"a code block {fence.info!r}"]
    problems = []
    for line in fence.content.rstrip("\n").split("\n"):
        labels = _MERMAID_LABEL.findall(line)
        if not _MERMAID_LINE.fullmatch(line) or \
                not all(_LABEL_CHARACTERS.match(label) for label in labels):
            problems.append(f"a Mermaid line {line!r:.80}")
    return problems


# ---------------------------------------------------------------------------------------------
# Cases

@dataclass
class Case:
    target: str
    index: int
    data: object                      # text, bytes, or a list of strings
    suffix: str = ".txt"              # how it is saved
    extra: dict = field(default_factory=dict)

    def save(self, folder: Path, report: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / f"{self.target}-{self.index}"
        data = self.data
        if isinstance(data, bytes):
            Path(f"{stem}{self.suffix}").write_bytes(data)
        elif isinstance(data, str):
            Path(f"{stem}{self.suffix}").write_text(data, encoding="utf-8", errors="surrogatepass")
        else:
            Path(f"{stem}.json").write_text(json.dumps({"data": data, **self.extra}, indent=1))
        Path(f"{stem}.report").write_text(report)
        return stem


class Context:
    """What the generators and runners share: the corpus, files written once, the weights'
    shapes and valid files, and a scratch folder."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.big = api.BUILTIN_SPEC.read_text()
        self.seeds = [path.read_text() for path in sorted((api.SPEC_DIR / "seeds").glob("*.tspec"))]
        self.small = FRAGMENTS + self.seeds
        self.variants = [path.read_text() for path in api.builtin_variants().values()]
        (scratch / "small.tspec").write_text(FRAGMENTS[2])
        self.small_variant = Variant("small", language.parse(FRAGMENTS[7], "small.tspec"),
                                     file="small.tspec", is_spec=True)
        self.base = api.load("base")
        self.names = {"base": list(self.base.spec.dims) + list(self.base.spec.choices)
                      + list(SETTINGS),
                      "small": list(self.small_variant.spec.dims)
                      + list(self.small_variant.spec.choices) + list(SETTINGS)}
        self.shapes = weights.expected_shapes(
            self.base.spec, {"arch": "encoder_only"},
            {"d_model": 8, "H": 2, "d_ff": 12, "N": 1, "V": 11, "max_len": 16})
        params = weights.random_params(self.shapes, 0)
        self.valid = {}
        for suffix in (".safetensors", ".npz"):
            path = scratch / f"valid{suffix}"
            weights.save(path, params)
            self.valid[suffix] = path.read_bytes()
        # np.savez dates its members: the same members with fixed dates, for replays
        self.valid[".npz"] = _zip(_npz_members(self.valid[".npz"]))
        (scratch / "variant.toml").write_text('spec = "small.tspec"\n[dims]\nd = 4\n')
        self._hf(scratch)
        # files no spec or variant is read from (HOSTILE_FILES): named pipes a reader would
        # wait at for ever, and a terabyte (sparse) past the spec's limit
        for name in ("fifo.tspec", "fifo.toml"):
            if hasattr(os, "mkfifo") and not (scratch / name).exists():
                os.mkfifo(scratch / name)
        with open(scratch / "huge.tspec", "wb") as huge:
            huge.truncate(1 << 40)
        self.counter = 0

    def _hf(self, scratch: Path) -> None:
        """The config and header targets' files: a tiny checkpoint of each kind of Hugging
        Face names, each family's variant imported from its config (which the checkpoint
        must load as), and GPT-2's checkpoint in the spec's names too."""
        rng = np.random.default_rng(0)
        self.hf_files, self.hf_bytes, self.hf_variants = {}, {}, {}
        for kind in ("gpt2", "llama", "qwen2"):
            self.hf_bytes[kind] = _safetensors_bytes(hf_state(kind, rng))
            self.hf_files[kind] = scratch / f"hf-{kind}.safetensors"
            self.hf_files[kind].write_bytes(self.hf_bytes[kind])
        for family, data in HF_CONFIGS.items():
            folder = scratch / f"hf-{family}"
            folder.mkdir(exist_ok=True)
            (folder / "config.json").write_text(json.dumps(data, indent=2))
            self.hf_variants[family] = api.load(folder)
            (folder / "config.json").unlink()
        params = api.load_weights("gpt2_small", self.hf_files["gpt2"], GPT2_SETS)
        spec_named = scratch / "spec-gpt2.safetensors"
        weights.save(spec_named, {key: value for key, value in params.items()})
        self.hf_bytes["tspec"] = spec_named.read_bytes()

    def fresh(self, suffix: str) -> Path:
        """A new file name (spec files are cached by path, time and size: never reuse one)."""
        self.counter += 1
        return self.scratch / f"in{os.getpid()}_{self.counter}{suffix}"


def make_case(target: str, seed: int, index: int, ctx: Context) -> Case:
    rng = random.Random(f"{seed}:{target}:{index}")
    if target == "parse":
        r = rng.random()
        if r < 0.25:
            text = mutate_text(rng, ctx.big, ctx.small)
        elif r < 0.3:
            text = gen_spec(rng)
        else:
            text = mutate_text(rng, rng.choice(ctx.small), ctx.small)
        as_file = rng.random() < 0.2
        data = text
        if as_file:
            data = text.encode("utf-8", "surrogatepass")
            if rng.random() < 0.5:
                data = _flip(rng, data)
        return Case(target, index, data, ".tspec")
    if target == "expr":
        text = expr_spec(rng)
        if rng.random() < 0.3:
            text = mutate_text(rng, text, ctx.small, rng.randint(1, 2))
        return Case(target, index, text, ".tspec")
    if target == "check":
        r = rng.random()
        text = gen_spec(rng) if r < 0.4 else rng.choice(ctx.small)
        if r >= 0.4 or rng.random() < 0.5:
            text = mutate_text(rng, text, ctx.small)
        return Case(target, index, text, ".tspec")
    if target == "variant":
        r = rng.random()
        if r < 0.4:
            text = mutate_text(rng, rng.choice(ctx.variants), ctx.variants,
                               token=_toml_token)
        elif r < 0.8:
            text = gen_toml(rng)
        else:
            text = mutate_text(rng, gen_toml(rng), ctx.variants, token=_toml_token)
        data = text.encode("utf-8", "surrogatepass")
        if rng.random() < 0.05:
            data = _flip(rng, data)
        return Case(target, index, data, ".toml")
    if target == "set":
        which = rng.choice(["base", "small"])
        settings = [gen_setting(rng, ctx.names[which]) for _ in range(rng.randint(1, 4))]
        return Case(target, index, settings, extra={"variant": which})
    if target == "grid":
        if rng.random() < 0.3:            # the command line on specs past the proof
            return _past_proof(gen_command_case(rng, index, ctx, "grid"))
        which = rng.choice(["base", "base", "small"])
        if rng.random() < 0.3:          # the API's form: dim name -> Python values
            axes = [[rng.choice(ctx.names[which][:12]) if rng.random() < 0.9 else
                     rng.choice(NAMES + ["", "1x"]), gen_values(rng)]
                    for _ in range(rng.randint(1, 3))]
            return Case(target, index, axes, extra={"variant": which, "settings": [],
                                                    "mapping": True})
        axes = [gen_axis(rng, ctx.names[which][:12]) for _ in range(rng.randint(1, 3))]
        settings = [gen_setting(rng, ctx.names[which]) if rng.random() < 0.3 else
                    f"{rng.choice(ctx.names[which][:12])}={rng.choice([1, 2, 4, 8, 64, 512])}"
                    for _ in range(rng.randint(0, 2))]
        return Case(target, index, axes, extra={"variant": which, "settings": settings})
    if target == "weights":
        suffix = rng.choice([".safetensors", ".npz"])
        valid = ctx.valid[suffix]
        if rng.random() < 0.05:
            data = valid
        elif suffix == ".safetensors":
            data = gen_safetensors(rng, valid)
        else:
            data = gen_npz(rng, valid, ctx.shapes)
        if rng.random() < 0.02:
            suffix = rng.choice([".pt", ".SAFETENSORS", ".npy", ""])
        return Case(target, index, data, suffix)
    if target == "cli":
        return Case(target, index, gen_argv(rng, ctx))
    if target == "docs":
        if rng.random() < 0.5:            # the docs of specs past the proof, at random sizes
            return _past_proof(gen_command_case(rng, index, ctx, "docs"))
        return Case(target, index, gen_docs(rng))
    if target in ONE_LINE_TARGETS:
        return ONE_LINE_TARGETS[target][0](rng, index, ctx)
    if target in COMMAND_TARGETS:
        return COMMAND_TARGETS[target][0](rng, index, ctx)
    if target in HF_TARGETS:
        return HF_TARGETS[target][0](rng, index, ctx)
    raise ValueError(f"unknown target {target!r}")


def _past_proof(case: Case) -> Case:
    """A docs or grid input that runs the command on a spec past the proof."""
    case.extra["command"] = case.target
    return case


def gen_argv(rng: random.Random, ctx: Context) -> list[str]:
    targets = ["base", "gpt2_small", "seed_000", "seed_002", "small.tspec", "variant.toml",
               "nope", "", "-", "--", ".", "/", "x.toml", "bert_base", "llama3_8b",
               "/dev/null", "a" * 300, *HOSTILE_FILES, "fifo.toml"]
    if rng.random() < 0.05:
        return gen_run_argv(rng, ctx)
    command = rng.choice(["check", "check", "check", "shapes", "diff", "list", "bogus", "",
                          "--version", "-h"])
    argv = [command]
    if command in ("check", "shapes"):
        argv += rng.sample(targets, 1 if command == "shapes" or rng.random() < 0.8 else 2)
    elif command == "diff":
        argv += rng.sample(targets, rng.choice([2, 2, 2, 1, 3]))
    names = ctx.names["base"]
    for _ in range(rng.randint(0, 3)):
        option = rng.random()
        if option < 0.4:
            argv += ["--set", gen_setting(rng, names)]
        elif option < 0.6 and command == "check":
            argv += ["--grid", gen_axis(rng, names[:12])]
        elif option < 0.75:
            argv += ["--format", rng.choice(["text", "json", "csv", "xml", ""])]
        elif option < 0.85:
            argv += ["--only", rng.choice(["valid", "invalid", "all"])]
        else:
            argv.append(rng.choice(["--set", "--grid", "--bogus", "-x", "--set=H=8",
                                    "--grid=H=1,2", "--format=json", "\x00", "é"]))
    if rng.random() < 0.1:
        argv = mutate_text(rng, "\x1f".join(argv), [], 1).split("\x1f")
    return argv


TINY = ["N=1", "d_model=16", "H=2", "d_ff=8", "V=50", "T=4", "T_dec=4", "max_len=8"]


def gen_run_argv(rng: random.Random, ctx: Context) -> list[str]:
    """tspec run at tiny sizes (the generated forward pass runs), with odd options."""
    target = rng.choice(["base", "gpt2_small", "llama3_8b", "bert_base", "seed_000"])
    argv = ["run", target]
    for setting in TINY:
        if rng.random() < 0.9:
            argv += ["--set", setting]
    if rng.random() < 0.5:
        argv += ["--set", gen_setting(rng, ctx.names["base"])]
    for _ in range(rng.randint(0, 2)):
        option = rng.choice(["--seed", "--decode", "--dtype", "--backend", "--typecheck"])
        argv.append(option)
        if option != "--typecheck":
            argv.append(rng.choice(["0", "1", "2", "3", "-1", "99999", "1e3", "float64",
                                    "float16", "numpy", "cupy", "torch", ""]))
    return argv


# ---------------------------------------------------------------------------------------------
# Running one case

class Hang(BaseException):
    """Raised by the alarm when an input runs past the time limit."""


class Crash(Exception):
    """A run that returned but broke the contract (for the CLI: a bad exit or error text)."""


class Refused(Exception):
    """The CLI refused its input as it should: exit 2 with one error line (counted as ours)."""


def _alarm(signum, frame):
    raise Hang()


def run_case(case: Case, ctx: Context):
    """Drive the entry point; return what it returned (raising is judged by the caller)."""
    target, data = case.target, case.data
    if target == "parse":
        if isinstance(data, bytes):
            path = ctx.fresh(".tspec")
            path.write_bytes(data)
            try:
                return api.read_spec(path)
            finally:
                path.unlink()
        return language.parse(data, "fuzz.tspec")
    if target in ("expr", "check"):
        return api.check(language.parse(data, "fuzz.tspec"))
    if target == "variant":
        path = ctx.fresh(".toml")
        path.write_bytes(data)
        try:
            variant = api.load(path)
        finally:
            path.unlink()
        return api.check(variant)
    if target == "set":
        base = ctx.base if case.extra["variant"] == "base" else ctx.small_variant
        return api.check(base.with_settings(data))
    if "command" in case.extra:
        return run_command(case, ctx)
    if target == "grid":
        base = ctx.base if case.extra["variant"] == "base" else ctx.small_variant
        if case.extra.get("mapping"):
            grid = api.grid(base, {name: grid_values(values) for name, values in data})
        else:
            grid = api.grid(base, [parse_axis(text) for text in data], case.extra["settings"])
        if len(grid) <= 2000:
            grid.text(), grid.csv("valid"), grid.as_dict("invalid")
        return grid
    if target == "weights":
        path = ctx.fresh(case.suffix)
        path.write_bytes(data)
        try:
            return weights.load(path, ctx.shapes)
        finally:
            path.unlink()
    if target == "cli":
        return run_cli(data, ctx)
    if target == "docs":
        return run_docs(data, ctx)
    if target in ONE_LINE_TARGETS:
        return ONE_LINE_TARGETS[target][1](case, ctx)
    if target in COMMAND_TARGETS:
        return COMMAND_TARGETS[target][1](case, ctx)
    if target in HF_TARGETS:
        return HF_TARGETS[target][1](case, ctx)
    raise ValueError(target)


def run_cli(argv: list[str], ctx: Context) -> int:
    """spec.cli.main in the scratch folder, its output captured; the exit status and the error
    text must keep the CLI's promise (0, 1 or 2; an exit 2 with one 'tspec: error:' line)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(ctx.scratch)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(list(argv))
            except SystemExit as stop:           # argparse: --help (0) or a usage error (2)
                if stop.code == 2:
                    lines = err.getvalue().split("\n")
                    usage = all(line.startswith(("usage: ", " ")) for line in lines[:-2])
                    if lines[-1] or not usage or not lines[-2].startswith("tspec: error: "):
                        raise Crash("argparse exit 2 without one error line after the usage: "
                                    f"{err.getvalue()!r}") from None
                    raise Refused(lines[-2]) from None
                if stop.code != 0:
                    raise Crash(f"SystemExit({stop.code!r})") from None
                return 0
    finally:
        os.chdir(here)
    if status not in (0, 1, 2):
        raise Crash(f"exit status {status!r}")
    if status == 2:
        # a warning (a NumPy overflow in a model's forward pass) is a line of its own
        text = "".join(line for line in err.getvalue().splitlines(True)
                       if not line.startswith("tspec: warning: "))
        if not (text.startswith("tspec: error: ") and text.endswith("\n")
                and text.count("\n") == 1 and len(text) > len("tspec: error: \n")):
            raise Crash(f"exit 2 without exactly one error line: {text!r}")
        if re.search(r"the generated code raised (NameError|UnboundLocalError|SyntaxError|"
                     r"TypeError|AttributeError|IndexError|KeyError|ZeroDivisionError) ", text):
            raise Crash(f"generated code that cannot run: {text.strip()!r}")
        raise Refused(text.strip())
    return status


def judge(case: Case, ctx: Context, time_limit: float) -> tuple[str, str]:
    """(status, detail): detail is the traceback of a crash, or the error of ours."""
    signal.setitimer(signal.ITIMER_REAL, time_limit)
    try:
        run_case(case, ctx)
        return "result", ""
    except Hang:
        return "hang", f"ran past {time_limit} s\n" + traceback.format_exc(limit=-12)
    except TspecError as error:
        text = str(error)
        if not error.message.strip() or "\n" in text:
            return "crash", f"{type(error).__name__} with a bad message: {text!r}"
        return "ours", f"{type(error).__name__}: {text}"
    except Refused as refusal:
        return "ours", str(refusal)
    except Exception:  # noqa: BLE001 (judged here: MemoryError, RecursionError included)
        return "crash", traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


# ---------------------------------------------------------------------------------------------
# The command line's one-line promise (issues 19 and 20): output that cannot be written,
# numbers too long to print, LaTeX that does not convert

OUTPUT_KINDS = ("closed", "full", "ascii", "latin-1")
FULL_DEVICE = "tspec: error: cannot write the output: No space left on device\n"


class HostileStdout(io.TextIOBase):
    """A standard output whose reader goes away ("closed") or whose device fills ("full")
    after ``room`` characters (None: never)."""

    def __init__(self, kind: str, room: int | None):
        self.kind, self.room, self.failed = kind, room, False

    def write(self, text: str) -> int:
        if self.room is not None and len(text) > self.room:
            self.room, self.failed = 0, True
            if self.kind == "closed":
                raise BrokenPipeError(32, "Broken pipe")
            raise OSError(28, "No space left on device")
        if self.room is not None:
            self.room -= len(text)
        return len(text)


def gen_output_case(rng: random.Random, index: int, ctx: Context) -> Case:
    out = str(ctx.scratch / f"out{rng.randrange(3)}")
    command = rng.choices(["check", "shapes", "diff", "list", "audit", "docs", "generate",
                           "run", "grid"], weights=[3, 3, 3, 2, 2, 2, 1, 1, 3])[0]
    formats = ["--format", rng.choice(["text", "json"])] if rng.random() < 0.4 else []
    argv = {
        "check": ["check", rng.choice(["base", "seed_004", "small.tspec", "variant.toml"])],
        "shapes": ["shapes", rng.choice(["base", "variant.toml", "gpt2_small"]), *formats],
        "diff": ["diff", *rng.sample(["base", "big", "gpt2_small", "gpt2_medium"], 2),
                 *formats],
        "list": ["list"],
        "audit": ["audit", "--out", f"{out}/audit.md"] + (["--check"] * (rng.random() < 0.3)),
        "docs": ["docs", "variant.toml", "--format", rng.choice(["md", "html", "all"]), "--out",
                 f"{out}/docs"] + (["--check"] * (rng.random() < 0.3)),
        "generate": ["generate", "--backend", "numpy", "--out", f"{out}/generated"],
        "run": ["run", "variant.toml", "--set", "B=1", "--set", "T=3"],
        "grid": ["check", "base", "--grid", "H=8,10", "--grid", "d_model=512:768:256",
                 "--format", rng.choice(["text", "json", "csv"])],
    }[command]
    if command == "check" and formats:
        argv += formats
    kind = rng.choice(OUTPUT_KINDS)
    room = rng.choice([0, 1, 17, 300, 5000]) if kind in ("closed", "full") else None
    return Case("output", index, argv, extra={"output": kind, "room": room})


def run_output(case: Case, ctx: Context) -> int:
    """spec.cli.main with a hostile standard output: a reader gone is 141 and silence, a full
    device 2 and its one line, an encoding without em dashes the usual outcome."""
    kind = case.extra["output"]
    if kind in ("closed", "full"):
        stdout = HostileStdout(kind, case.extra["room"])
    else:
        stdout = io.TextIOWrapper(io.BytesIO(), encoding=kind)
    err = io.StringIO()
    here = os.getcwd()
    os.chdir(ctx.scratch)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
            status = cli.main(list(case.data))
    finally:
        os.chdir(here)
    text = err.getvalue()
    if getattr(stdout, "failed", False):
        if kind == "closed" and (status, text) != (141, ""):
            raise Crash(f"a reader gone: exit {status}, stderr {text!r} (141 and nothing)")
        if kind == "full" and (status != 2 or not text.endswith(FULL_DEVICE)):
            raise Crash(f"a full device: exit {status}, stderr {text!r}")
        return status
    if status not in (0, 1, 2):
        raise Crash(f"exit status {status!r}, stderr {text!r}")
    if status == 2:
        if not (text.startswith("tspec: error: ") and text.count("\n") == 1):
            raise Crash(f"exit 2 without exactly one error line: {text!r}")
        raise Refused(text.strip())
    return status


def gen_printers_case(rng: random.Random, index: int, ctx: Context) -> Case:
    """A spec with derived dims k and m of up to 64 * 3 * 40 = 7,680 digits and more, two
    variants of it, and one command that shows their numbers. (Constraints between such
    polynomials cost the prover seconds: those are not what this target is for.)"""
    powers = " * ".join(f"d**{rng.randint(40, 64)}" for _ in range(rng.randint(1, 3)))
    require = rng.choice(["", "require k <= 3\n", "require k % 7 == 0\n", "require d <= 99\n"])
    text = (HEADER + f'dim k "huge"\ndim m "huger"\nlet k = {powers}\n'
            f"let m = k * d + {rng.randint(1, 9)}\n{require}"
            'input X "B T d" "x"\nparam W "d k" "w"\nparam W2 "k m" "w2"\n'
            'Y "B T m" "y" = X @ W @ W2\noutput Y\n')
    sizes = ["9" * rng.randint(36, 40), "9" * rng.randint(1, 40)]   # the first: past 4,300
    command = rng.choice(["check", "check-json", "shapes", "shapes-json", "diff", "diff-json",
                          "grid", "grid-csv", "grid-json", "docs", "run"])
    return Case("printers", index, [text, *sizes, command], ".json")


def run_printers(case: Case, ctx: Context):
    text, a, b, command = case.data
    stem = ctx.fresh("")
    spec = stem.with_suffix(".tspec")
    spec.write_text(text)
    for name, size in (("a", a), ("b", b)):
        Path(f"{stem}_{name}.toml").write_text(f'spec = "{spec.name}"\n[dims]\nd = {size}\n')
    first, second = f"{stem}_a.toml", f"{stem}_b.toml"
    argv = {"check": ["check", first], "check-json": ["check", first, "--format", "json"],
            "shapes": ["shapes", first], "shapes-json": ["shapes", first, "--format", "json"],
            "diff": ["diff", first, second],
            "diff-json": ["diff", first, second, "--format", "json"],
            "grid": ["check", str(spec), "--grid", f"d={a},{b}"],
            "grid-csv": ["check", str(spec), "--grid", f"d={a},{b}", "--format", "csv"],
            "grid-json": ["check", str(spec), "--grid", f"d={a},{b}", "--format", "json"],
            "docs": ["docs", first, "--format", "all", "--out", f"{stem}_docs"],
            "run": ["run", first]}[command]
    return run_cli(argv, ctx)


LATEX = ["$", "$", "x", "^", "_", "{", "}", "{}", "\\frac", "\\sqrt", "\\left(", "\\right)",
         "\\", "&", "\\begin{matrix}", "\\end{matrix}", "\\begin{", "1", " ", "\\alpha",
         "\\mathrm", "\\operatorname", "`", "<", ">", "&amp;", "'", "\\\\", "%", "#", "~",
         "\\limits", "\\sum", "^{", "_{", "\\over", "\\binom", "\\color{red}", "\\text{",
         "\\hat", "\\,", "\\!", "|", "\\|", "\\{", "\\}", "é", "𝑥", "<script>"]


def gen_meanings_case(rng: random.Random, index: int, ctx: Context) -> Case:
    meanings = ["".join(rng.choice(LATEX) for _ in range(rng.randint(1, 12)))
                for _ in range(3)]
    return Case("meanings", index, meanings, ".json")


def run_meanings(case: Case, ctx: Context):
    from tspec.docs import site as docs
    first, second, third = (m.replace('"', "'") for m in case.data)
    text = (f'spec tiny "{first}"\ndim B "batch"\ndim T "length"\ndim d "{second}"\n'
            f'input X "B T d" "x"\nparam W "d d" "{third}"\nY "B T d" "y" = X @ W\n'
            "output Y\n")
    variant = Variant("tiny", language.parse(text, "tiny.tspec"), file="tiny.tspec",
                      is_spec=True)
    return docs.files([variant.with_settings(["d=4"])], "all")


ONE_LINE_TARGETS = {"output": (gen_output_case, run_output),
                    "printers": (gen_printers_case, run_printers),
                    "meanings": (gen_meanings_case, run_meanings)}


# ---------------------------------------------------------------------------------------------
# The commands past the proof (issue 20): shapes, diff, docs, grids and run of specs that get
# through it (the fragments, the seeds, generated and lightly mutated specs), at random sizes

COMMANDS = ("shapes", "diff", "docs", "grid", "run")
SIZES = [1, 2, 3, 4, 8, 16, 64, 512, 4096, 10 ** 12, int("9" * 40)]


def _names(text: str) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """A spec's dims that take values (neither fixed nor derived) and its choices' options
    ([], {} when it does not parse)."""
    try:
        spec = language.parse(text, "s.tspec")
    except (TspecError, RecursionError):
        return [], {}
    derived, pending = set(), list(spec.body)
    while pending:
        statement = pending.pop()
        derived |= {statement.dim} if isinstance(statement, Let) else set()
        pending += getattr(statement, "body", []) + getattr(statement, "otherwise", [])
    return [n for n, d in spec.dims.items() if d.value is None and n not in derived], \
        {n: tuple(c.options) for n, c in spec.choices.items()}


def gen_command_case(rng: random.Random, index: int, ctx: Context, command: str) -> Case:
    """A spec that mostly passes the proof, two variants of it, and one command past the
    proof with odd options (a run's sizes tiny, a grid's axes short)."""
    r = rng.random()
    text = rng.choice(ctx.small) if r < 0.6 else gen_spec(rng) if r < 0.85 else \
        mutate_text(rng, rng.choice(ctx.small), ctx.small, 1)
    original = None
    if command == "run" and rng.random() < 0.4:   # a name spelt as generated code's own
        try:
            tokens = tokenize(text)
        except TspecError:
            tokens = []
        names = sorted({t.text for t, after in itertools.pairwise(tokens)
                        if t.kind == "name" and after.text != "="}   # not an op's keyword
                       - set(KEYWORDS) - set(FUNCTIONS))
        if names:
            taken = set(re.findall(r"[A-Za-z]\w*", text))
            old, new = rng.choice(names), rng.choice([n for n in CODE_NAMES if n not in taken])
            original, text = (text, old, new), renamed(text, old, new)
    dims, choices = _names(text)
    sizes = SIZES[:5] if command == "run" else SIZES

    def side() -> dict:
        return {n: rng.choices(sizes, weights=range(len(sizes), 0, -1))[0] for n in dims
                if rng.random() < 0.85}
    chosen = {n: rng.choice(options) if rng.random() < 0.95 else "zz"
              for n, options in choices.items() if rng.random() < 0.5}
    argv: list[str] = []
    if command in ("shapes", "diff") and rng.random() < 0.5:
        argv += ["--format", rng.choice(["text", "json"])]
    elif command == "docs":
        argv += ["--format", rng.choice(["md", "html", "all"])]
    elif command == "grid":
        for name in rng.sample(dims, min(len(dims), rng.randint(1, 2))) or ["d"]:
            start, span, step = rng.choice([1, 2, 8, 64]), rng.randint(0, 40), rng.randint(1, 4)
            listed = ",".join(map(str, rng.sample(SIZES, 3)))
            argv += ["--grid", rng.choice([f"{name}={start}:{start + span}:{step}",
                                           f"{name}={listed}"])]
        argv += ["--format", rng.choice(["text", "csv", "json"])]
        argv += ["--only", rng.choice(["valid", "invalid"])] if rng.random() < 0.2 else []
    elif command == "run":
        argv += rng.choice([[], [], ["--seed", "3"], ["--dtype", "float64"], ["--typecheck"],
                            ["--max-memory", "1M"], ["--decode", "1"]])
    return Case(command, index, {"spec": text, "a": side(), "b": side(), "choices": chosen,
                                 "argv": argv, "original": original}, ".json")


def run_command(case: Case, ctx: Context):
    """The command on the spec and its variants, as `tspec` runs it (an exit status of 0, 1
    or 2 with one error line); docs pages written must pass ``page_problems``. A spec with a
    name spelt as generated code's own (``original``: the spec as it was) must end as the
    original does where that succeeds."""
    data = case.data
    if data.get("original") is None:
        return _run_command(case, ctx)
    text, old, new = data["original"]
    back = {name: value for name, value in data.items() if name in ("a", "b", "choices")}
    back = {side: {old if name == new else name: value for name, value in values.items()}
            for side, values in back.items()}
    first, second = {}, {}
    try:
        before = _run_command(Case(case.target, case.index, data | back | {
            "spec": text, "original": None}, case.suffix, case.extra), ctx, first)
    except (Refused, TspecError):
        before = 2
    try:
        after = _run_command(case, ctx, second)
        # the same numbers, but where the name is a parameter's (drawn by its name) or B or T
        params = re.findall(r"^\s*param\s+(\w+)", text, re.MULTILINE)
        if first and second and old not in params + ["B", "T"]:
            for name, value in first.items():
                again = second.get(new if name == old else name)
                if again is None or not np.array_equal(value, again, equal_nan=True):
                    raise Crash(f"renaming {old} to {new} changed the output {name}")
    except (Refused, TspecError) as error:
        # B and T have run's default sizes: renamed, they must be given
        if before == 0 and "reserved by the spec language" not in str(error) and \
                not re.search(r"dim \w+ has no value", str(error)):
            raise Crash(f"the spec ran, but not with a name spelt as generated code's: "
                        f"{error}") from None
        raise
    return after


def _run_command(case: Case, ctx: Context, outputs: dict | None = None):
    """The command run once; a run's outputs (api.run, seeded) into ``outputs``."""
    data, command = case.data, case.extra.get("command", case.target)
    folder = ctx.fresh("")
    folder.mkdir()
    try:
        spec = folder / "s.tspec"
        spec.write_text(data["spec"], encoding="utf-8", errors="surrogatepass")
        for side in ("a", "b"):
            table = "".join(f"{n} = {v}\n" for n, v in data[side].items())
            chosen = "".join(f'{n} = "{v}"\n' for n, v in data["choices"].items())
            (folder / f"{side}.toml").write_text(f'spec = "s.tspec"\n[dims]\n{table}'
                                                 f"[choices]\n{chosen}")
        a, b, out = (str(folder / name) for name in ("a.toml", "b.toml", "out"))
        if command == "grid":
            varied = {arg.split("=")[0] for arg in data["argv"] if "=" in arg}
            fixed = [f"{n}={v}" for n, v in {**data["a"], **data["choices"]}.items()
                     if n not in varied]
            argv = ["check", str(spec), *data["argv"], *(a for f in fixed for a in ("--set", f))]
        else:
            argv = {"shapes": ["shapes", a], "diff": ["diff", a, b],
                    "docs": ["docs", a, "--out", out], "run": ["run", a]}[command] + data["argv"]
        status = run_cli(argv, ctx)
        if command == "run" and status == 0 and outputs is not None:
            here = os.getcwd()
            os.chdir(ctx.scratch)
            try:
                outputs.update(api.run(api.load(a)).outputs)
            finally:
                os.chdir(here)
        for page in sorted(Path(out).glob("*.*")) if command == "docs" else ():
            problems = page_problems(page.name, page.read_text(encoding="utf-8"))
            if problems:
                raise Crash(f"{page.name}: {problems[0]}")
        return status
    finally:
        shutil.rmtree(folder, ignore_errors=True)


COMMAND_TARGETS = {command: (lambda rng, index, ctx, command=command:
                             gen_command_case(rng, index, ctx, command), run_command)
                   for command in ("shapes", "diff", "run")}


# ---------------------------------------------------------------------------------------------
# Hugging Face configs and checkpoints (issue 32): hostile config.json texts through `tspec
# import` and beside a checkpoint; hostile safetensors headers (and shard indexes) through
# tspec.load_weights and `tspec run --weights`. NumPy's warnings are errors here: a warning on
# stderr is not the one line the command line promises.

HF_SIZES = {"d": 8, "H": 2, "H_kv": 1, "d_ff": 12, "V": 11, "N": 2, "positions": 16}
HF_CONFIGS = {
    "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 8,
             "n_head": 2, "n_layer": 2, "vocab_size": 11, "n_positions": 16, "n_ctx": 16,
             "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
             "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
             "initializer_range": 0.02, "summary_type": "cls_index", "summary_use_proj": True,
             "summary_activation": None, "summary_proj_to_labels": True,
             "summary_first_dropout": 0.1, "scale_attn_weights": True, "use_cache": True,
             "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
             "bos_token_id": 0, "eos_token_id": 0, "tie_word_embeddings": True,
             "transformers_version": "5.23.0", "dtype": "float32"},
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8,
              "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2,
              "vocab_size": 11, "intermediate_size": 12, "rms_norm_eps": 1e-6,
              "hidden_act": "silu", "max_position_embeddings": 16, "head_dim": 4,
              "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
              "rope_theta": 500000.0, "pretraining_tp": 1, "attention_dropout": 0.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192},
              "bos_token_id": 1, "eos_token_id": 2, "use_cache": True,
              "transformers_version": "4.43.0", "torch_dtype": "bfloat16"},
    "mistral": {"model_type": "mistral", "architectures": ["MistralForCausalLM"],
                "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
                "num_hidden_layers": 2, "vocab_size": 11, "intermediate_size": 12,
                "rms_norm_eps": 1e-5, "sliding_window": 4, "hidden_act": "silu",
                "max_position_embeddings": 16, "tie_word_embeddings": False,
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                "transformers_version": "5.23.0"},
    "qwen2": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 8,
              "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2,
              "vocab_size": 11, "intermediate_size": 12, "rms_norm_eps": 1e-6,
              "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 2,
              "layer_types": ["full_attention", "full_attention"], "hidden_act": "silu",
              "max_position_embeddings": 16, "tie_word_embeddings": False,
              "rope_theta": 1000000.0, "transformers_version": "5.23.0"},
}
# the checkpoint each family's names are read from (Qwen2's has biases on Q, K and V)
HF_CHECKPOINTS = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "qwen2"}
GPT2_SETS = ["N=2", "d_model=8", "H=2", "d_ff=32", "V=11", "max_len=16", "T_dec=4", "B=1"]


def hf_state(kind: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A tiny checkpoint of Hugging Face names at HF_SIZES: GPT-2's, Llama's, or Qwen2's."""
    d, kv, ff, V, L = (HF_SIZES[k] for k in ("d", "H_kv", "d_ff", "V", "N"))
    k = d // HF_SIZES["H"] * kv
    if kind == "gpt2":
        shapes = {"transformer.wte.weight": (V, d), "transformer.wpe.weight": (16, d),
                  "transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,)}
        for i in range(L):
            p = f"transformer.h.{i}"
            shapes.update({f"{p}.ln_1.weight": (d,), f"{p}.ln_1.bias": (d,),
                           f"{p}.attn.c_attn.weight": (d, 3 * d), f"{p}.attn.c_attn.bias": (3 * d,),
                           f"{p}.attn.c_proj.weight": (d, d), f"{p}.attn.c_proj.bias": (d,),
                           f"{p}.ln_2.weight": (d,), f"{p}.ln_2.bias": (d,),
                           f"{p}.mlp.c_fc.weight": (d, 4 * d), f"{p}.mlp.c_fc.bias": (4 * d,),
                           f"{p}.mlp.c_proj.weight": (4 * d, d), f"{p}.mlp.c_proj.bias": (d,)})
    else:
        shapes = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,),
                  "lm_head.weight": (V, d)}
        for i in range(L):
            p = f"model.layers.{i}"
            shapes.update({f"{p}.self_attn.q_proj.weight": (d, d),
                           f"{p}.self_attn.k_proj.weight": (k, d),
                           f"{p}.self_attn.v_proj.weight": (k, d),
                           f"{p}.self_attn.o_proj.weight": (d, d),
                           f"{p}.mlp.gate_proj.weight": (ff, d), f"{p}.mlp.up_proj.weight": (ff, d),
                           f"{p}.mlp.down_proj.weight": (d, ff),
                           f"{p}.input_layernorm.weight": (d,),
                           f"{p}.post_attention_layernorm.weight": (d,)})
            if kind == "qwen2":
                shapes.update({f"{p}.self_attn.q_proj.bias": (d,),
                               f"{p}.self_attn.k_proj.bias": (k,),
                               f"{p}.self_attn.v_proj.bias": (k,)})
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def _safetensors_bytes(state: dict[str, np.ndarray]) -> bytes:
    from safetensors.numpy import save
    return save(state)


class RawJSON:
    """JSON text a value stands for in a generated config (an integer of 5,001 digits, which
    Python will not write; 1e999999): put in place of its placeholder after json.dumps."""
    def __init__(self, text: str):
        self.text = text


def _json_text(value, indent: int | None = 2) -> str:
    """``value`` as JSON text, every RawJSON in it as its text."""
    raws: list[str] = []

    def marked(item):
        if isinstance(item, RawJSON):
            raws.append(item.text)
            return f"\u0001RAW{len(raws) - 1}\u0001"
        if isinstance(item, dict):
            return {key: marked(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [marked(inner) for inner in item]
        return item
    text = json.dumps(marked(value), indent=indent)
    for number, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\u0001RAW{number}\u0001"), raw)
    return text


def hostile_number(rng: random.Random):
    return rng.choice([
        0, -1, 1, 2, 3, 4, 7, 8, 16, 10 ** 6, 2 ** 31, 2 ** 63, 2 ** 64, 10 ** 39, 10 ** 40 - 1,
        10 ** 40, 10 ** 400, -10 ** 400, 10 ** 4000, 1.5, 0.5, 1e-12, 1e308, 1e-320, -0.0,
        float("nan"), float("inf"), float("-inf"), True, False, None,
        RawJSON("1" * rng.choice([1001, 4300, 4301, 5001])), RawJSON("-" + "9" * 2000),
        RawJSON("1e999999"), RawJSON("-0"), RawJSON("1" + "0" * 300), RawJSON("1E+400"),
        RawJSON("0." + "0" * 2000 + "1"), RawJSON("1" * 999)])


def hostile_value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if r < 0.45:
        return hostile_number(rng)
    if r < 0.7:
        return rng.choice(["", "gpt2", "llama", "bert", "t5", "silu", "gelu", "gelu_new", "relu",
                           "llama3", "yarn", "default", "full_attention", "sliding_attention",
                           "\u0000", "a\u0000b", "\n", "\u2028", "é" * 10, "x" * 5000,
                           "GPT2LMHeadModel", "LlamaForCausalLM", "8", "1e-5", "NaN",
                           "../../etc/passwd"])
    if r < 0.85 and depth < 3:
        return [hostile_value(rng, depth + 1) for _ in range(rng.choice([0, 1, 2, 3, 50]))]
    if depth < 3:
        return {rng.choice(["a", "rope_type", "type", "factor", "rope_theta", "", "\u0000"]):
                hostile_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return None


# every field the families read, and fields of models tspec does not import
HF_FIELDS = sorted({name for config in HF_CONFIGS.values() for name in config} | {
    "n_inner", "layer_types", "rope_parameters", "rope_scaling", "use_sliding_window",
    "max_window_layers", "head_dim", "is_encoder_decoder", "add_cross_attention",
    "cross_attention_hidden_size", "partial_rotary_factor", "position_embedding_type",
    "type_vocab_size", "layer_norm_eps", "is_decoder", "id2label", "quantization_config",
    "_name_or_path", "num_experts", "rope_type", "quantum"})


def gen_config(rng: random.Random, family: str) -> bytes:
    """A config.json: the family's own, with a few fields hostile, or its text broken."""
    data = json.loads(json.dumps(HF_CONFIGS[family]))
    r = rng.random()
    if r < 0.1:
        return _json_text(data).encode()
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        op = rng.randrange(10)
        name = rng.choice(list(data) or ["model_type"])
        if op <= 2:                           # a field it has, hostile
            data[name] = hostile_value(rng)
        elif op == 3:                         # a field of any family, hostile or plausible
            data[rng.choice(HF_FIELDS)] = hostile_value(rng) if rng.random() < 0.7 else \
                rng.choice([1, 2, 8, 16, 1e-5, True, False, None, "silu"])
        elif op == 4:
            data.pop(name, None)
        elif op == 5:                         # identity
            data[rng.choice(["model_type", "architectures"])] = rng.choice([
                "gpt2", "bert", "llama", "mistral", "qwen2", "gemma", "roberta", "", None,
                ["gpt2"], {"a": 1}, 5, ["GPT2LMHeadModel"], ["RobertaModel"], "LlamaModel",
                ["LlamaForCausalLM", "MistralForCausalLM"], [None], ["\u0000"]])
        elif op == 6:                         # rope tables
            table = dict(HF_CONFIGS["llama"]["rope_scaling"])
            key = rng.choice(list(table) + ["rope_theta", "type", "partial_rotary_factor", "x"])
            table[key] = hostile_value(rng) if rng.random() < 0.8 else table.get(key)
            if rng.random() < 0.3:
                table.pop(rng.choice(list(table)), None)
            data[rng.choice(["rope_scaling", "rope_parameters"])] = table
        elif op == 7:                         # layer types, as many as the layers or not
            count = rng.choice([0, 1, 2, 3, 100_000])
            data["num_hidden_layers"] = rng.choice([count, 2, count + 1])
            data["layer_types"] = [rng.choice(["full_attention", "sliding_attention", 3])
                                   if rng.random() < 0.01 else "full_attention"
                                   for _ in range(count)]
        elif op == 8:                         # a dim at the edge of what a variant holds
            data[rng.choice([n for n in data if isinstance(data[n], int)] or [name])] = \
                rng.choice([10 ** 40 - 1, 10 ** 40, 2 ** 63, 4 * 10 ** 39, 10 ** 39 // 4 + 1])
        else:                                 # deep nesting
            data[name] = RawJSON("[" * rng.choice([10, 100, 5000]) + "]" *
                                 rng.choice([10, 100, 5000]))
    text = _json_text(data, indent=rng.choice([None, 2])).encode("utf-8", "surrogatepass")
    r = rng.random()
    if r < 0.08:
        text = text[:rng.randint(0, len(text))]
    elif r < 0.14:
        text = _flip(rng, text)
    elif r < 0.17:
        text = rng.choice([b"", b"null", b"[]", b"1", b'"x"', b"\xef\xbb\xbf" + text,
                           text.decode().encode("utf-16"), text + b" x", b"{" * 100_000,
                           text[:-1] + b', "n_layer": 3, "n_layer": 4}', b" " * 1_000_001,
                           text + b" " * 1_000_000])
    return text


def gen_config_case(rng: random.Random, index: int, ctx: Context) -> Case:
    family = rng.choice(list(HF_CONFIGS))
    mode = rng.choices(["import", "beside", "cli"], weights=[5, 5, 1])[0]
    return Case("config", index, gen_config(rng, family), ".json",
                extra={"family": family, "mode": mode,
                       "argv": rng.choice(["import", "check", "run"]) if mode == "cli"
                       else None})


def run_config(case: Case, ctx: Context):
    folder = ctx.fresh("")
    folder.mkdir()
    path = folder / "config.json"
    path.write_bytes(case.data)
    family, mode = case.extra["family"], case.extra["mode"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            if mode == "import":
                text = from_hf(path)
                return text, api.check(api.load(path))
            os.link(ctx.hf_files[HF_CHECKPOINTS[family]], folder / "model.safetensors")
            if mode == "beside":
                return api.load_weights(ctx.hf_variants[family], folder)
            command = case.extra["argv"]
            argv = {"import": ["import", str(path)], "check": ["check", str(folder)],
                    "run": ["run", str(folder), "--set", "T_dec=4", "--set", "B=1",
                            "--weights", str(folder)]}[command]
            return run_cli(argv, ctx)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- safetensors headers

HEADER_DTYPES = [["F32"], {"F32": 1}, 4, None, "", "f32", "F32 ", "BF16", "F16", "F64",
                 "F8_E4M3", "I64", "BOOL", True, "\u0000"]


def _shape_value(rng: random.Random):
    return rng.choice([
        [2 ** 62] * rng.choice([2, 63, 64, 65, 300, 30_000]), [2 ** 63], [2 ** 63 - 1, 0],
        [0, 10 ** 30], [0, 2 ** 63], [-1], [[2]], [1.5], [True], [], [0], "8", None,
        [RawJSON("9" * 5001)], [RawJSON("9" * 999), 0], [1] * 100_000, [8, 8, 8, 8],
        [2 ** 31, 2 ** 31, 2 ** 31]])


def gen_header_bytes(rng: random.Random, valid: bytes) -> bytes:
    header, data = _split_safetensors(valid)
    names = [n for n in header if n != "__metadata__"]
    op = rng.randrange(20)
    if op < 6:                                  # the weight files' mutations
        return gen_safetensors(rng, valid)
    name = rng.choice(names)
    entry = header[name]
    if op == 6:
        entry["dtype"] = rng.choice(HEADER_DTYPES)
    elif op in (7, 8):
        entry["shape"] = _shape_value(rng)
        if rng.random() < 0.3:
            entry["data_offsets"] = [0, rng.choice([0, 4, 2 ** 64, 10 ** 30])]
    elif op == 9:
        entry["data_offsets"] = rng.choice([
            [0, RawJSON("9" * 5001)], [RawJSON("-" + "9" * 30), 4], [0, 2 ** 64], [0.0, 4],
            [True, 4], [0, None], [[0], 4], [2 ** 63, 2 ** 63 + 4], "0,4", {}])
    elif op in (10, 11):                        # layer numbers read from names
        prefix = name.split(".")[0]
        number = rng.choice(["99999999999999999999", "9" * 5000, "2", "3", "7", "01", "-1",
                             "1" * 41, "0" * 5000, "1" + "0" * 4300, "4294967296"])
        layer = (f"transformer.h.{number}.ln_1.bias" if prefix == "transformer" else
                 f"model.layers.{number}.input_layernorm.weight" if prefix == "model" else
                 f"decoder.layers.{number}.norm_1.beta")
        header[layer] = dict(entry)
        if rng.random() < 0.5:                  # and the layer before it gone
            for other in [n for n in names if ".0." in n][:rng.randint(1, 5)]:
                header.pop(other, None)
    elif op == 12:                              # an odd name
        header[rng.choice(["\u0000", "", "a" * 10_000, "\u2028", name + "\u0000",
                           name.replace(".0.", ".00."), "transformer.h..ln_1.bias",
                           "transformer.h.٣.ln_1.bias"])] = header.pop(name)
    elif op == 13:                              # not finite, or past float16's range
        array = np.frombuffer(bytearray(data), dtype=np.uint8)
        start, _ = header[name]["data_offsets"]
        if header[name]["dtype"] == "F32":
            value = rng.choice([np.nan, np.inf, -np.inf, 1e6, 3e38])
            array[start:start + 4] = np.frombuffer(np.float32(value).tobytes(), np.uint8)
        data = array.tobytes()
    elif op == 14:                              # integers of many digits anywhere
        text = json.dumps(header).replace("]", ", " + "1" * rng.choice([999, 1001, 5001])
                                          + "]", 1)
        return _safetensors(text.encode(), data)
    elif op == 15:
        header["__metadata__"] = rng.choice([{"format": "pt"}, {"n": RawJSON("7" * 2000)},
                                             [1] * 1000, {"a": {"b": {"c": None}}}])
    elif op == 16:                              # the same names twice, one lying
        text = json.dumps(header)
        text = text[:-1] + f', {json.dumps(name)}: {_json_text(_lying(rng, entry), None)}}}'
        return _safetensors(text.encode(), data)
    elif op == 17:                              # a tensor 1-D or 0-D that is a matrix
        count = int(np.prod(entry["shape"]))
        entry["shape"] = rng.choice([[count], [], [1, 1, count]]) if count == 1 or \
            rng.random() < 0.8 else [count]
    elif op == 18:                              # dtype and data agree, another dtype
        for other in names:
            header[other]["dtype"] = rng.choice(["F16", "BF16", "F64", "F32"])
        return _safetensors(_json_text(header, None).encode(), data + bytes(len(data)))
    else:
        for other in names[:rng.randint(1, 4)]:
            header.pop(other, None)
    return _safetensors(_json_text(header, None).encode(), data)


def _lying(rng: random.Random, entry: dict) -> dict:
    return {**entry, "shape": _shape_value(rng)} if rng.random() < 0.5 else \
        {**entry, "dtype": rng.choice(HEADER_DTYPES)}


def gen_header_case(rng: random.Random, index: int, ctx: Context) -> Case:
    names = rng.choice(["gpt2", "gpt2", "tspec"])
    valid = ctx.hf_bytes[names]
    data = valid if rng.random() < 0.08 else gen_header_bytes(rng, valid)
    settings = list(GPT2_SETS)
    if rng.random() < 0.15:                     # the variant's sizes against the file's
        other = rng.choice(["N=1000000", f"N={10 ** 39}", "N=1", "N=3", "d_model=16", "V=12",
                            f"d_model={10 ** 39}", "max_len=8"])
        settings = [other if setting.split("=")[0] == other.split("=")[0] else setting
                    for setting in settings]
    mode = rng.choices(["api", "index", "cli"], weights=[16, 3, 1])[0]
    index_text = None
    if mode == "index":
        header, _ = _split_safetensors(valid)
        shard = rng.choice(["model-1.safetensors", "a\u0000b.safetensors", "", ".", "..",
                            "../model-1.safetensors", "sub/model-1.safetensors",
                            "model-2.safetensors", "\u2028", "m" * 300])
        weight_map = {n: shard for n in header if n != "__metadata__"}
        if rng.random() < 0.3:
            weight_map[rng.choice(list(weight_map))] = rng.choice(
                ["model-2.safetensors", 5, None, "model-1.safetensors"])
        if rng.random() < 0.2:
            weight_map["extra"] = "model-1.safetensors"
        index_text = _json_text({"metadata": {"total_size": hostile_number(rng)},
                                 "weight_map": weight_map}, None)
        if rng.random() < 0.1:
            index_text = rng.choice(["[]", "{", '{"weight_map": 5}', index_text[:50],
                                     '{"weight_map": {}, "n": ' + "9" * 5001 + "}"])
    dtype = rng.choice([None] * 16 + ["float16", "float64", "float16", "bfloat16", "int8", 5])
    return Case("header", index, data, ".safetensors",
                extra={"names": names, "settings": settings, "mode": mode,
                       "index": index_text, "dtype": dtype})


def run_header(case: Case, ctx: Context):
    folder = ctx.fresh("")
    folder.mkdir()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            mode, settings = case.extra["mode"], case.extra["settings"]
            if mode == "index":
                (folder / "model-1.safetensors").write_bytes(case.data)
                (folder / "model.safetensors.index.json").write_text(case.extra["index"])
                path = folder
            else:
                path = folder / "model.safetensors"
                path.write_bytes(case.data)
            if mode == "cli":
                argv = ["run", "gpt2_small", *[part for setting in settings
                                               for part in ("--set", setting)],
                        "--weights", str(path)]
                if case.extra["dtype"] in ("float16", "float64"):
                    argv += ["--dtype", case.extra["dtype"]]
                return run_cli(argv, ctx)
            return api.load_weights("gpt2_small", path, settings, dtype=case.extra["dtype"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


HF_TARGETS = {"config": (gen_config_case, run_config),
              "header": (gen_header_case, run_header)}


# ---------------------------------------------------------------------------------------------
# Workers

@dataclass
class Tally:
    inputs: int = 0
    counts: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    slowest: float = 0.0
    errors: Counter = field(default_factory=Counter)      # our errors' kinds (for --stats)

    def add(self, status: str, seconds: float, detail: str = "") -> None:
        self.inputs += 1
        self.counts[status] += 1
        self.seconds += seconds
        self.slowest = max(self.slowest, seconds)
        if status == "ours":
            self.errors[_kind(detail)] += 1

    def merge(self, other: "Tally") -> None:
        self.inputs += other.inputs
        self.counts.update(other.counts)
        self.seconds += other.seconds
        self.slowest = max(self.slowest, other.slowest)
        self.errors.update(other.errors)


def _kind(message: str) -> str:
    """An error message without its place, names, values and quoted text: its kind."""
    text = message.split("\n")[0]
    text = re.sub(r"^(tspec: error: |[A-Za-z]+Error: )", "", text)
    text = re.sub(r"(/|\.\./)?[\w./-]*\.(tspec|toml|npz|safetensors)(:\d+)*:? ?", "", text)
    text = re.sub(r"/[\w./-]*tspec-fuzz-[\w.-]*/[\w./-]*", "PATH", text)   # a worker's files
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", text)
    return text[:80]


def _limit_memory(megabytes: int) -> None:
    if megabytes > 0:
        limit = megabytes * 2 ** 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def worker(number, tasks, results, progress, seed, time_limit, memory_limit, crash_dir):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _alarm)
    scratch = Path(tempfile.mkdtemp(prefix=f"tspec-fuzz-{number}-"))
    try:
        ctx = Context(scratch)
        _limit_memory(memory_limit)
        while True:
            task = tasks.get()
            if task is None:
                break
            target, start, stop = task
            tally, failures = Tally(), []
            progress[SLOTS * number] = TARGETS.index(target)
            progress[SLOTS * number + 1] = start
            progress[SLOTS * number + 4] = stop
            for index in range(start, stop):
                progress[SLOTS * number + 2] = index
                progress[SLOTS * number + 3] = time.time()
                case = make_case(target, seed, index, ctx)
                began = time.perf_counter()
                status, detail = judge(case, ctx, time_limit)
                tally.add(status, time.perf_counter() - began, detail)
                if status in ("crash", "hang"):
                    case.save(crash_dir, detail)
                    failures.append((target, index, status, detail))
            progress[SLOTS * number + 3] = 0.0
            results.put((number, target, start, stop, tally, failures))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _chunks(plan: dict[str, int]) -> list[tuple[str, int, int]]:
    """Chunks of each target's inputs, interleaved so that every target runs all along."""
    per_target = {t: [(t, s, min(s + CHUNK, n)) for s in range(0, n, CHUNK)]
                  for t, n in plan.items()}
    out = []
    while any(per_target.values()):
        for target in TARGETS:
            if per_target.get(target):
                out.append(per_target[target].pop(0))
    return out


def fuzz(plan: dict[str, int], seed: int, workers: int, time_limit: float, memory_limit: int,
         crash_dir: Path) -> tuple[dict[str, Tally], list]:
    context = multiprocessing.get_context("fork")
    tasks, results = context.Queue(), context.Queue()
    progress = context.Array("d", SLOTS * workers, lock=False)
    chunks = _chunks(plan)
    for chunk in chunks:
        tasks.put(chunk)
    pending = len(chunks)
    args = (tasks, results, progress, seed, time_limit, memory_limit, crash_dir)
    processes = {}

    def start(number):
        progress[SLOTS * number + 3] = 0.0
        process = context.Process(target=worker, args=(number, *args), daemon=True)
        process.start()
        processes[number] = process

    for number in range(workers):
        start(number)
    tallies = {target: Tally() for target in plan}
    failures: list = []
    done = 0
    while pending:
        try:
            number, target, _, _, tally, found = results.get(timeout=1.0)
        except queue.Empty:
            for number, process in list(processes.items()):
                since = progress[SLOTS * number + 3]
                stuck = since and time.time() - since > 3 * time_limit + 10
                if process.is_alive() and not stuck:
                    continue
                target = TARGETS[int(progress[SLOTS * number])]
                begin = int(progress[SLOTS * number + 1])
                index = int(progress[SLOTS * number + 2])
                stop = int(progress[SLOTS * number + 4])
                if stuck:
                    process.kill()
                process.join()
                status = "hang" if stuck else "crash"
                detail = f"the worker was stuck past {3 * time_limit + 10} s and was killed" \
                    if stuck else f"the worker died (exit code {process.exitcode})"
                _record_lost(target, seed, index, status, detail, crash_dir, tallies, failures)
                # the chunk's other inputs again: those before it were judged, but their
                # tally died with the worker (judging is deterministic, so they count once)
                for part in ((begin, index), (index + 1, stop)):
                    if part[0] < part[1]:
                        tasks.put((target, *part))
                        pending += 1
                pending -= 1
                start(number)
            continue
        tallies[target].merge(tally)
        failures += found
        pending -= 1
        done += 1
        if done % 100 == 0:
            total = sum(t.inputs for t in tallies.values())
            print(f"  {total:,} inputs judged, {len(failures)} crash(es) or hang(s)",
                  file=sys.stderr, flush=True)
    for _ in processes:
        tasks.put(None)
    for process in processes.values():
        process.join(timeout=30)
    return tallies, failures


def _record_lost(target, seed, index, status, detail, crash_dir, tallies, failures):
    """A worker that died or hung past the alarm: record its input (made again here)."""
    scratch = Path(tempfile.mkdtemp(prefix="tspec-fuzz-lost-"))
    try:
        case = make_case(target, seed, index, Context(scratch))
        case.save(crash_dir, detail)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    tally = Tally()
    tally.add(status, 0.0)
    tallies[target].merge(tally)
    failures.append((target, index, status, detail))


# ---------------------------------------------------------------------------------------------
# Command line

def plan_inputs(total: int, targets: list[str]) -> dict[str, int]:
    share = sum(SHARES[t] for t in targets)
    plan = {t: int(total * SHARES[t] / share) for t in targets}
    plan[targets[0]] += total - sum(plan.values())
    return plan


def table(tallies: dict[str, Tally], wall: float) -> str:
    rows = [("target", "inputs", "results", "ours", "crashes", "hangs", "time", "per input",
             "slowest")]
    total = Tally()
    for target, tally in tallies.items():
        total.merge(tally)
        rows.append(_row(target, tally))
    rows.append(_row("all", total))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"wall time {wall:.1f} s (time: the workers' time on the inputs, summed)")
    return "\n".join(lines)


def _row(name: str, tally: Tally) -> tuple:
    per = tally.seconds / tally.inputs * 1000 if tally.inputs else 0.0
    return (name, f"{tally.inputs:,}", *(f"{tally.counts[s]:,}" for s in STATUSES),
            f"{tally.seconds:.1f} s", f"{per:.1f} ms", f"{tally.slowest:.2f} s")


def replay(spec: str, seed: int, time_limit: float) -> int:
    target, _, index = spec.partition(":")
    signal.signal(signal.SIGALRM, _alarm)
    scratch = Path(tempfile.mkdtemp(prefix="tspec-fuzz-replay-"))
    try:
        ctx = Context(scratch)
        case = make_case(target, seed, int(index), ctx)
        shown = case.data if not isinstance(case.data, bytes) or len(case.data) < 400 \
            else case.data[:400] + b"..."
        print(f"{target}:{index} (seed {seed}) {case.extra or ''}\n{shown!r}\n")
        status, detail = judge(case, ctx, time_limit)
        print(status)
        print(detail)
        return 0 if status in ("result", "ours") else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000,
                        help="inputs in all, shared among the targets (default 100,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", action="append", choices=TARGETS,
                        help="fuzz this entry point only (repeatable; default: all)")
    parser.add_argument("--time-limit", type=float, default=10.0,
                        help="seconds one input may take before it counts as a hang")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", type=int, default=4096, metavar="MIB",
                        help="address-space limit of each worker (0: none)")
    parser.add_argument("--crash-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "tspec-fuzz-crashes",
                        help="where crashing and hanging inputs are saved, with their "
                             "tracebacks (default: tspec-fuzz-crashes in the temporary folder)")
    parser.add_argument("--stats", action="store_true",
                        help="also list each target's most common errors of ours (their kinds)")
    parser.add_argument("--replay", metavar="TARGET:INDEX",
                        help="run one input again and print its outcome")
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay, args.seed, args.time_limit)
    targets = args.target or list(TARGETS)
    plan = plan_inputs(args.inputs, targets)
    print(f"fuzzing {args.inputs:,} inputs (seed {args.seed}, {args.workers} workers, "
          f"time limit {args.time_limit} s): "
          + ", ".join(f"{t} {n:,}" for t, n in plan.items()), file=sys.stderr)
    began = time.perf_counter()
    tallies, failures = fuzz(plan, args.seed, args.workers, args.time_limit, args.memory_limit,
                             args.crash_dir)
    wall = time.perf_counter() - began
    print(table(tallies, wall))
    if args.stats:
        for target, tally in tallies.items():
            print(f"\n{target}: the most common errors of ours")
            for kind, count in tally.errors.most_common(12):
                print(f"  {count:6d}  {kind}")
    if failures:
        places = Counter(_place(detail) for _, _, _, detail in failures)
        print(f"\n{len(failures)} crash(es) or hang(s), saved under {args.crash_dir}/; "
              f"{len(places)} distinct place(s):")
        for place, count in places.most_common():
            example = next(f"{t}:{i}" for t, i, _, d in failures if _place(d) == place)
            print(f"  {count:6d}  {place}  (e.g. --replay {example})")
        return 1
    return 0


def _place(detail: str) -> str:
    """A crash's signature: its exception and the innermost frame in our code."""
    lines = detail.strip().splitlines()
    frames = [line.strip() for line in lines if line.strip().startswith('File "')]
    ours = [f for f in frames if "/spec/" in f or "/codegen/" in f] or frames
    where = re.sub(r'File ".*/((?:spec|codegen)/[^"]+)"', r"\1", ours[-1]) if ours else ""
    error = lines[-1].split(":")[0][:80] if lines else ""
    return f"{error} @ {where}"


if __name__ == "__main__":
    sys.exit(main())
