"""The facts each op and each runtime helper declares for code generation (spec/ops/catalogue.py,
codegen/backends.py) are true of the code: its array functions exist, its helpers have
templates, and a helper calls only the helpers and imports only the modules it declares."""

import ast
import dataclasses

import numpy as np
import pytest
from support.refusals import raises

from tspec import api
from tspec.codegen import backends
from tspec.codegen.backends import BACKENDS, IMPORTS, RUNTIME_HELPERS, helpers, runtime_order
from tspec.codegen.generate import BUILTIN_MODELS, source
from tspec.codegen.rendering import render
from tspec.errors import CodegenError
from tspec.ops import catalogue
from tspec.ops.catalogue import FUNCTIONS, OPERATORS, OPS


def test_every_array_function_is_numpys():
    named = {op.name: op.array_function for op in OPS.values() if op.array_function}
    assert named and {name: f for name, f in named.items() if not callable(getattr(np, f, None))} \
        == {}


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS)
def test_every_helper_has_a_template_on_every_backend(backend):
    names = [op.helper for op in OPS.values() if op.helper] + \
        [helper.name for helper in runtime_order(backend)]
    for name in names:
        render.environment().get_template(backend.template(name))


def test_every_op_is_spelled_once_or_reached_by_syntax():
    spellings = [op.spelling for op in OPS.values() if op.spelling is not None]
    assert len(spellings) == len(set(spellings))
    assert {**FUNCTIONS, **OPERATORS} == {op.spelling: op.name for op in OPS.values()
                                          if op.spelling is not None}
    assert dict(OPERATORS) == {"@": "matmul", "+": "add", "-": "sub", "*": "mul", "/": "div",
                               "**": "pow"}


def definitions(tree: ast.Module) -> set[str]:
    """The names a module's top level binds."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def loaded(tree: ast.Module) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS)
def test_the_helpers_needs_and_imports_are_honest(backend):
    """In the runtime as rendered, each helper's code calls only helpers among those it needs
    (and theirs), and loads exactly the imported names it declares."""
    order = runtime_order(backend)
    trees = {h.name: ast.parse(render.helper_source(backend, h.name)) for h in order}
    owner = {name: helper for helper, tree in trees.items() for name in definitions(tree)}
    needs = {helper.name: helper.needs for helper in order}

    def closure(name: str) -> set[str]:
        return {name}.union(*(closure(need) for need in needs[name]))

    runtime = ast.parse(render.render_runtime(backend))
    assert definitions(runtime) >= set(owner)
    for name, tree in trees.items():
        calls = {owner[used] for used in loaded(tree) if used in owner}
        assert calls <= closure(name), (name, calls - closure(name))
        declared = set(dict(helpers(backend))[name].imports)
        assert loaded(tree) & set(IMPORTS) == declared, name
    # each helper after the ones it needs: the runtime defines it after them
    position = {helper.name: index for index, helper in enumerate(order)}
    assert all(position[need] < position[h.name] for h in order for need in h.needs)


def test_a_runtime_imports_what_its_helpers_declare():
    text = render.render_runtime(BACKENDS["numpy"])
    imports = text[text.index('"""\n\n') + 5:text.index("VERSION = ")]
    assert imports.splitlines()[:7] == ["import ast", "import functools", "import inspect",
                                        "import itertools", "import math", "import operator",
                                        "import os"]
    assert "from scipy.special import erf\n" in imports
    assert "erf" not in render.render_runtime(BACKENDS["cupy"]).split("VERSION = ")[0]


def test_needs_that_go_round_or_name_no_helper_are_refused(monkeypatch):
    numpy = BACKENDS["numpy"]
    monkeypatch.setitem(OPS, "relu", dataclasses.replace(OPS["relu"], needs=("absent",)))
    with raises(CodegenError, "helper relu needs absent, which is no helper of the numpy "
                "runtime"):
        runtime_order(numpy)
    monkeypatch.setitem(OPS, "relu", dataclasses.replace(OPS["relu"], needs=("silu",)))
    monkeypatch.setitem(OPS, "silu", dataclasses.replace(OPS["silu"], needs=("relu",)))
    with raises(CodegenError, "the helpers' needs go round in a circle: relu -> silu -> relu"):
        runtime_order(numpy)


def test_an_op_may_not_take_another_helper(monkeypatch):
    monkeypatch.setitem(OPS, "tanh", dataclasses.replace(OPS["tanh"], helper="project"))
    with raises(CodegenError, "op tanh's helper project is already one of the runtime's own: "
                "name another in spec/ops/catalogue.py"):
        helpers(BACKENDS["numpy"])
    monkeypatch.setitem(OPS, "tanh", dataclasses.replace(OPS["tanh"], helper="gelu"))
    with raises(CodegenError, "op gelu's helper gelu is already op tanh's: name another in "
                "spec/ops/catalogue.py"):         # tanh comes first in the catalogue
        helpers(BACKENDS["numpy"])


def test_the_runtime_helpers_table_names_each_once():
    names = [helper.name for helper in RUNTIME_HELPERS]
    assert len(names) == len(set(names))
    assert catalogue.ACTIVATIONS.keys() == {"relu", "gelu", "gelu_tanh", "silu"}


def test_code_that_calls_a_helper_the_runtime_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(backends, "RUNTIME_HELPERS",
                        tuple(h for h in RUNTIME_HELPERS if h.name != "log_mask"))
    with raises(CodegenError, "code calls rt.log_mask, which the numpy runtime does not have: "
                "name it as an op's helper= in spec/ops/catalogue.py and write its template"):
        source(api.read_spec(api.BUILTIN_SPEC), {"arch": "encoder_only"})
    numpy = dataclasses.replace(BACKENDS["numpy"], batched_matmul="stacked_matmul")
    with raises(CodegenError, "backend numpy chooses the helper stacked_matmul, which is none "
                "of codegen.backends.RUNTIME_HELPERS"):
        runtime_order(numpy)


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_the_settings_each_op_declares_are_those_its_code_reads(name):
    # what `unused-setting` judges by (an op's `settings`) is what the generated module takes
    from tspec.language.uses import op_uses
    from tspec.ops.catalogue import SETTINGS
    spec = api.read_spec(api.BUILTIN_SPEC)
    chosen = spec.choice_values(BUILTIN_MODELS[name])
    read = {setting for op, conditions in op_uses(spec).items()
            if any(all(chosen[c] in o for c, o in cond) for cond in conditions)
            for setting in OPS[op].settings}
    module = ast.parse(source(spec, BUILTIN_MODELS[name]))
    taken = {arg.arg for node in ast.walk(module) if isinstance(node, ast.FunctionDef)
             for arg in node.args.kwonlyargs if arg.arg in SETTINGS}
    assert read == taken and read, name
