"""Adding an op is one catalogue entry and its helper's template: nothing else names it.

softplus(x) = log(1 + exp(x)), an op tspec does not have, is defined here in a scratch entry of
the catalogue (``OPS``) and a scratch template folder, and is then checked, counted,
documented, generated (fused into the product it follows, as the activations are) and run.
"""

import ast
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy
from support import cupy_on_cpu
from support.arrays import needs_compiler
from support.refusals import raises

from tspec import api
from tspec.analysis.counts import costs
from tspec.codegen.generate import source
from tspec.codegen.rendering import render
from tspec.docs import site as docs
from tspec.errors import CodegenError
from tspec.execution.loading import load_source
from tspec.ops import catalogue
from tspec.ops.catalogue import Elementwise

# log(1 + exp(x)): exp, the add and log
SOFTPLUS = Elementwise("softplus", "log(1 + exp(x)), a smooth ReLU",
                       latex_name=r"\mathrm{softplus}", per_element=3, spelling="softplus",
                       helper="softplus", activation=True)
TEMPLATE = "def softplus(x, out=None):\n    return {{ xp }}.logaddexp(0, x, out=out)\n"
SPEC = '''spec softplus_layer "one layer with a softplus"
dim B "batch size"
dim T "sequence length"
dim d "width"
dim d_ff "hidden width"
input X "B T d"
param W "d d_ff" "weight"
param b "d_ff" "bias"
Y "B T d_ff" "hidden activations" = softplus(X @ W + b)
output Y
'''
ROOT = Path(__file__).resolve().parents[2]


def module_state() -> tuple[dict, dict]:
    """What tspec's modules hold: each module-level name's value (by id), and the items of
    every table among those values (by the table's id)."""
    names, tables = {}, {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("tspec.") or name.startswith("tspec.generated"):
            continue
        for key, value in vars(module).items():
            names[name, key] = id(value)
            if isinstance(value, dict):
                tables[id(value)] = tuple((k, id(v)) for k, v in value.items())
            elif isinstance(value, (list, set, frozenset)):
                tables[id(value)] = tuple(sorted(map(id, value)))
    return names, tables


@pytest.fixture
def softplus(monkeypatch, tmp_path):
    """softplus in the catalogue and its template in a folder the templates are looked up in;
    the spec that uses it, as a file."""
    (tmp_path / "templates" / "helpers").mkdir(parents=True)
    (tmp_path / "templates" / "helpers" / "softplus.py.j2").write_text(TEMPLATE)
    names, tables = module_state()
    monkeypatch.setitem(catalogue.OPS, "softplus", SOFTPLUS)
    monkeypatch.setattr(render, "TEMPLATE_DIRS", [*render.TEMPLATE_DIRS, tmp_path / "templates"])
    # nothing else is patched: the parser, checker, counts, docs, lowering and the reserved
    # names find the op in OPS
    names_now, tables_now = module_state()
    assert [key for key in names_now if names_now[key] != names.get(key)] == [
        ("tspec.codegen.rendering.render", "TEMPLATE_DIRS")]
    changed = [table for table, items in tables.items() if tables_now.get(table, items) != items]
    assert changed == [id(catalogue.OPS)]
    render.environment.cache_clear()         # it read TEMPLATE_DIRS
    path = tmp_path / "softplus_layer.tspec"
    path.write_text(SPEC)
    yield path
    render.environment.cache_clear()


def test_nothing_in_tspec_names_softplus():
    """The op below is new: no source file of tspec's knows it."""
    sources = [*(ROOT / "spec").rglob("*.py"), *(ROOT / "codegen").rglob("*.py"),
               *(ROOT / "codegen" / "templates").rglob("*.j2")]
    assert sources and [p for p in sources if "softplus" in p.read_text()] == []


def test_a_new_op_is_checked_counted_documented_generated_and_run(softplus):
    variant = api.load(softplus)
    assert api.check(variant).ok
    B, T, d, d_ff = sympy.symbols("B T d d_ff", positive=True, integer=True)
    flops = costs(variant.spec, {})["softplus_layer"].flops
    assert sympy.simplify(flops.matmul - 2 * B * T * d * d_ff) == 0
    # the bias's add, then softplus's 3 per element
    assert sympy.simplify(flops.other - 4 * B * T * d_ff) == 0

    page = docs.files([variant], "md")["softplus_layer.md"]
    assert r"\mathrm{softplus}\left(X W + b\right)" in page

    text = source(variant.spec, {})
    assert '    Y = rt.project(X, params["W"], params["b"], activation=rt.softplus)  # B T d_ff\n' \
        in text
    model = load_source(text)
    assert "def softplus(" in Path(model.rt.__file__).read_text()
    rng = np.random.default_rng(0)
    X, W, b = rng.standard_normal((2, 3, 4)) * 30, rng.standard_normal((4, 5)), \
        rng.standard_normal(5)
    expected = np.logaddexp(0, X @ W + b)
    np.testing.assert_allclose(model.softplus_layer(X, {"W": W, "b": b}), expected,
                               rtol=1e-15, atol=0)


@needs_compiler
def test_a_new_op_runs_in_the_cupy_rendering(softplus):
    text = source(api.load(softplus).spec, {}, "cupy")
    ast.parse(text)
    model = cupy_on_cpu.load_source(text)
    rng = np.random.default_rng(1)
    X, W, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5)), rng.standard_normal(5)
    xp = cupy_on_cpu.cupy
    result = model.softplus_layer(xp.asarray(X), {"W": xp.asarray(W), "b": xp.asarray(b)})
    np.testing.assert_allclose(result.get(), np.logaddexp(0, X @ W + b), rtol=1e-15, atol=0)


def test_an_op_without_code_is_refused_when_generating(softplus, monkeypatch):
    monkeypatch.setitem(catalogue.OPS, "softplus", dataclasses.replace(SOFTPLUS, helper=None))
    spec = api.load(softplus).spec
    with raises(CodegenError, "op softplus has no code: give it helper= or array_function= "
                "in spec/ops/catalogue.py"):
        source(spec, {})


def test_an_unknown_array_function_is_refused_when_generating(softplus, monkeypatch):
    monkeypatch.setitem(catalogue.OPS, "softplus", dataclasses.replace(
        SOFTPLUS, helper=None, array_function="softplus"))
    spec = api.load(softplus).spec
    with raises(CodegenError, "op softplus calls np.softplus, which NumPy (and so CuPy) does "
                "not have: fix its array_function= in spec/ops/catalogue.py"):
        source(spec, {})


def test_a_helper_without_a_template_is_refused_when_generating(softplus):
    (softplus.parent / "templates" / "helpers" / "softplus.py.j2").unlink()
    render.environment.cache_clear()
    with raises(CodegenError, "helper softplus (op softplus's) has no template for numpy: "
                "write codegen/templates/helpers/softplus.py.j2"):
        source(api.load(softplus).spec, {})
