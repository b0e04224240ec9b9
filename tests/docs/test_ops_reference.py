"""The manual's op reference, docs/manual/ops.md: generated from the op catalogue by `tspec
docs` with the shipped documentation, compared by `tspec docs --check`, and naming every op,
function and operator a spec can write."""

import re
import tomllib

import pytest
from markdown_it import MarkdownIt
from support.command_line import ROOT, run

from tspec import api
from tspec.docs import reference
from tspec.docs import site as docs
from tspec.files import GENERATED
from tspec.ops.catalogue import FUNCTIONS, OPERATORS, OPS, SCALAR_FUNCTIONS, SETTINGS, Elementwise

PAGE = ROOT / "docs" / "manual" / "ops.md"


def test_the_committed_op_reference_is_what_the_catalogue_gives():
    assert PAGE.read_text(encoding="utf-8") == reference.files()["ops.md"]
    assert PAGE.read_text(encoding="utf-8").startswith(f"<!-- {GENERATED} -->\n# Op reference\n")


def test_the_op_reference_names_every_function_and_operator_a_spec_can_write():
    # the README's hand-written list missed five (rms_norm, silu, repeat_heads,
    # sliding_window_mask, rotary); the generated page has an entry for every op
    text = PAGE.read_text(encoding="utf-8")
    sections = re.findall(r"^### `(\w+)`$", text, re.MULTILINE)
    assert sections == list(OPS)
    glance = text.split("## The ops at a glance", 1)[1].split("\n## ", 1)[0]
    spans = re.findall(r"`([^`]*)`", glance)
    named = {name for span in spans for name in re.findall(r"(\w+)\(", span)}
    assert sorted(set(FUNCTIONS) - named) == []
    written = " ".join(spans)
    assert [symbol for symbol in OPERATORS if f" {symbol} " not in written] == []
    assert all(f"`{name}`" in text for name in SCALAR_FUNCTIONS)
    assert all(f"| `{name}` |" in text for name in SETTINGS)
    for syntax in ("E[t]", "P[:n]", "P[a:b]", "X.T", "-X", "X / c"):
        assert f"`{syntax}`" in glance


def test_the_op_reference_is_markdown_that_makes_no_html_and_no_emphasis():
    html = MarkdownIt("commonmark").enable("table").render(PAGE.read_text(encoding="utf-8"))
    assert "<em>" not in html and "<strong>" not in html
    # the header comment is the page's only raw HTML
    assert html.count("<!--") == 1
    assert "<script" not in html


def test_the_template_is_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "docs/templates/*.j2" in data["package-data"]["tspec"]
    assert (ROOT / "spec" / "docs" / "templates" / "ops.md.j2").is_file()


@pytest.fixture
def shipped_copy(tmp_path, monkeypatch, capsys):
    """`tspec docs` of the shipped documentation, pointed at a copy: base's pages (standing for
    every shipped variant's) in tmp/variants and the op reference in tmp/manual."""
    variants, manual = tmp_path / "variants", tmp_path / "manual"
    manual.mkdir()
    monkeypatch.setattr(docs, "shipped_variants", lambda: [api.load("base")])
    monkeypatch.setattr(docs, "default_dir", lambda variants_=None: variants)
    monkeypatch.setattr(docs, "manual_dir", lambda: manual)
    assert run(capsys, "docs")[0] == 0
    return variants, manual


def test_docs_writes_the_op_reference_with_the_shipped_pages(shipped_copy, capsys):
    variants, manual = shipped_copy
    assert (manual / "ops.md").read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")
    assert run(capsys, "docs", "--check") == (
        0, f"{variants} and {manual / 'ops.md'} are current\n", "")


def test_docs_check_fails_when_the_op_reference_is_edited(shipped_copy, capsys):
    variants, manual = shipped_copy
    page = manual / "ops.md"
    page.write_text(page.read_text(encoding="utf-8").replace("Matrix product", "Matrix sum"),
                    encoding="utf-8")
    code, out, err = run(capsys, "docs", "--check")
    assert code == 1
    assert f"--- {page}\n+++ generated\n" in out
    assert "-| [matmul](#matmul) | `X @ Y` | Matrix sum with" in out
    assert "+| [matmul](#matmul) | `X @ Y` | Matrix product with" in out
    assert err == (f"tspec: documentation in {variants} and {page} is stale; run `tspec "
                   "docs`\n")
    page.unlink()                                       # missing is stale too
    assert run(capsys, "docs", "--check")[0] == 1
    assert run(capsys, "docs")[0] == 0
    assert run(capsys, "docs", "--check")[0] == 0


def test_docs_check_fails_when_the_catalogue_changes(shipped_copy, capsys, monkeypatch):
    # a scratch op added to the catalogue is an entry of the reference at once
    monkeypatch.setitem(OPS, "softplus", Elementwise(
        "softplus", "log(1 + exp(x))", latex_name="\\mathrm{softplus}", per_element=3,
        spelling="softplus", array_function="logaddexp"))
    code, out, _ = run(capsys, "docs", "--check")
    assert code == 1
    assert "+### `softplus`\n" in out
    assert "+| [softplus](#softplus) | `softplus(X)` | log(1 + exp(x)) |\n" in out


def test_docs_does_not_replace_an_op_reference_tspec_did_not_write(shipped_copy, capsys):
    _, manual = shipped_copy
    (manual / "ops.md").write_text("# my own notes\n", encoding="utf-8")
    code, out, err = run(capsys, "docs")
    assert (code, out) == (2, "")
    assert err.startswith(f"tspec: error: {manual / 'ops.md'}: tspec did not write this file")
    assert (manual / "ops.md").read_text(encoding="utf-8") == "# my own notes\n"
    assert run(capsys, "docs", "--force")[0] == 0
    assert (manual / "ops.md").read_text(encoding="utf-8") == PAGE.read_text(encoding="utf-8")


def test_docs_of_chosen_variants_or_into_another_folder_leaves_the_manual(tmp_path, capsys,
                                                                        monkeypatch):
    manual = tmp_path / "manual"
    monkeypatch.setattr(docs, "manual_dir", lambda: manual)
    monkeypatch.setattr(docs, "shipped_variants", lambda: [api.load("base")])
    for argv in (["docs", "base", "--format", "md", "--out", str(tmp_path / "a")],
                 ["docs", "--format", "md", "--out", str(tmp_path / "b")]):
        assert run(capsys, *argv)[0] == 0
    assert not manual.exists()
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["base.md", "index.md"]


def test_the_shipped_manual_folder_is_the_checkouts():
    assert docs.manual_dir() == ROOT / "docs" / "manual"
    assert docs.manual_dir().is_dir()
