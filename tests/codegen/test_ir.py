"""The typed IR (codegen/ir.py) and its passes (codegen/passes/): each pass on a small IR,
the printer's exact text for small expressions, the records of every built-in module holding
data and never Python text, one macro per step kind, and unknown kinds refused."""

import ast
import dataclasses
import functools
import typing

import pytest
import sympy
from support.refusals import raises

from tspec import api
from tspec.analysis.counts import Activations
from tspec.codegen import generate, ir, passes
from tspec.codegen.backends import backend
from tspec.codegen.lowering.lower import lower
from tspec.codegen.passes import attention, fusion, memory, residual
from tspec.codegen.rendering import render as render_module
from tspec.codegen.rendering.printer import Printer
from tspec.codegen.rendering.steps import StepRenderer
from tspec.errors import CodegenError
from tspec.language.parser import parse
from tspec.ops import catalogue
from tspec.symbolic.shape import Shape

SPEC = api.read_spec(api.BUILTIN_SPEC)
B, T, D, F = sympy.symbols("B T d d_ff", positive=True, integer=True)
H = sympy.Symbol("H", positive=True, integer=True)


def tensor(name: str, *dims, family=None, dtype: str = "float") -> ir.Tensor:
    return ir.Tensor(ir.Name(name), Shape(tuple(dims), family), dtype)


def param(name: str, *dims) -> ir.Tensor:
    return ir.Tensor(ir.item(ir.Name("params"), name), Shape(tuple(dims)), "float")


def module_of(*steps: ir.Step, name: str = "block", backend_name: str = "numpy") -> ir.Module:
    function = ir.Function(
        name=name, summary="", source="", where="t.tspec:1", equations=(), arguments=(),
        params_class=None, cache=False, keywords=(), returns=(), prologue=(), steps=steps)
    return ir.Module("t", "T", "t.tspec", "0" * 64, (), backend(backend_name),
                     functions=[function], entry=name)


def only_steps(module: ir.Module) -> tuple[ir.Step, ...]:
    (function,) = module.functions
    return function.steps


# -- the passes

PROJECT = ir.Runtime("project")
X, W, b = tensor("X", B, T, D), param("W", D, F), param("b", F)
PRODUCT = ir.Tensor(ir.call(PROJECT, X, W), Shape((B, T, F)), "float")


def assign(name: str, value: ir.Expr) -> ir.Assign:
    return ir.Assign((ir.Name(name),), value, ir.Comment(Shape((B, T, F))))


def test_a_bias_added_to_a_projection_is_added_in_place():
    out = fusion.fuse_projections(module_of(assign("Y", ir.BinOp("+", PRODUCT, b))))
    (step,) = only_steps(out)
    assert ir.unwrap(step.value) == ir.Call(PROJECT, (X, W, b))


def test_an_activation_of_a_projection_is_applied_in_place():
    biased = ir.Tensor(ir.BinOp("+", PRODUCT, b), Shape((B, T, F)), "float")
    out = fusion.fuse_projections(module_of(assign("U", ir.call(ir.Runtime("relu"), biased))))
    (step,) = only_steps(out)
    assert step.value == ir.Call(PROJECT, (X, W, b),
                                 (ir.Keyword("activation", ir.Runtime("relu")),))


def test_fusion_leaves_what_it_cannot_do_in_place():
    matrix_bias = param("c", T, F)                          # not a vector: broadcast, copied
    family_bias = ir.Tensor(ir.Name("c"), Shape((F,), H), "float")
    not_activation = ir.call(ir.Runtime("softmax"), PRODUCT)
    twice = ir.call(ir.Runtime("relu"), ir.call(PROJECT, X, W, activation=ir.Runtime("gelu")))
    steps = (assign("Y1", ir.BinOp("+", PRODUCT, matrix_bias)),
             assign("Y2", ir.BinOp("+", PRODUCT, family_bias)),
             assign("Y3", ir.BinOp("+", PRODUCT, ir.Scalar(D))),
             assign("Y4", ir.BinOp("-", PRODUCT, b)),
             assign("Y5", not_activation), assign("Y6", twice))
    assert only_steps(fusion.fuse_projections(module_of(*steps))) == steps


# the residual sums a norm reads (codegen.passes.residual)
Y, A = tensor("Y", B, T, D), tensor("A", B, T, D)
GAMMA, BETA, EPS = param("gamma", D), param("beta", D), ir.Name("eps")
SETTINGS = ir.Name("settings")


def residual_sum(left: ir.Expr = Y, right: ir.Expr = A) -> ir.Tensor:
    return ir.Tensor(ir.BinOp("+", left, right), Shape((B, T, D)), "float")


def norm(helper: str, x: ir.Expr, *weights: ir.Expr) -> ir.Tensor:
    return ir.Tensor(ir.call(ir.Runtime(helper), x, *weights, EPS), Shape((B, T, D)), "float")


def rendered(module: ir.Module) -> str:
    steps = StepRenderer(Printer(module.backend.alias),
                         render_module.environment().get_template("steps.py.j2").module)
    return "\n".join(steps.lines(module.functions[0].steps))


@functools.cache
def normalize_block() -> ir.Function:
    """The built-in spec's ``normalize`` under RMSNorm as lowering makes it: a block that is
    its argument's norm alone."""
    module = lower(SPEC, generate.BUILTIN_MODELS["llama"], backend("cupy"), rewrites=())
    return next(f for f in module.functions if f.name == "normalize")


def pre_norm_layer(*keywords: ir.Keyword, traces: bool = True) -> ir.Module:
    """Z_1 = Y + A, then Z_1n = normalize(Z_1), then Z_1 again."""
    call = ir.CallBlock(("Z_1n",), "normalize", (tensor("Z_1", B, T, D),
                                                  ir.item(ir.Name("params"), "norm_2"),
                                                  SETTINGS),
                        keywords, ir.Comment(Shape((B, T, D))))
    layer = module_of(ir.Assign((ir.Name("Z_1"),), residual_sum(), ir.Comment(Shape((B, T, D)))),
                      call, ir.Assign((ir.Name("Z_out"),), ir.BinOp("+", ir.Name("Z_1"),
                                                                    ir.Name("F"))),
                      backend_name="cupy")
    layer.functions[0] = dataclasses.replace(layer.functions[0], traces=traces)
    layer.functions.append(normalize_block())
    return layer


def test_a_norm_of_a_residual_sum_reads_both_summands_on_cupy():
    post = module_of(assign("Z", norm("layer_norm", residual_sum(), GAMMA, BETA)),
                     backend_name="cupy")
    assert rendered(residual.fuse_residuals(post)) == \
        'Z = rt.layer_norm(Y, params["gamma"], params["beta"], eps, residual=A)  # B T d_ff'
    fused = residual.fuse_residuals(post)
    assert residual.fuse_residuals(fused) == fused                        # once


def test_a_named_sum_the_stream_keeps_is_written_by_the_norm_untraced():
    layer = pre_norm_layer(ir.Keyword("trace", ir.call(ir.Runtime("subtrace"), ir.Name("trace"),
                                                       ir.Literal("norm_2"))))
    out = residual.fuse_residuals(layer)
    assert rendered(out) == """\
if trace is None:  # Z_1 and Z_1n, its norm, in one kernel
    Z_1 = cp.empty_like(Y)  # B T d
    # B T d
    Z_1n = rt.rms_norm(Y, params["norm_2"]["gamma"], settings.eps, residual=A, total=Z_1)
else:
    Z_1 = Y + A  # B T d
    Z_1n = normalize(
        Z_1, params["norm_2"], settings, trace=rt.subtrace(trace, "norm_2")
    )  # B T d
Z_out = Z_1 + F"""
    assert out.functions[1] == layer.functions[1]                        # the block as it was
    assert residual.fuse_residuals(out) == out                           # once


def test_a_function_without_a_trace_fuses_at_once():
    out = residual.fuse_residuals(pre_norm_layer(traces=False))
    assert rendered(out) == """\
Z_1 = cp.empty_like(Y)  # B T d
Z_1n = rt.rms_norm(Y, params["norm_2"]["gamma"], settings.eps, residual=A, total=Z_1)  # B T d
Z_out = Z_1 + F"""


def test_a_norm_block_called_without_its_settings_stays_a_call():
    layer = pre_norm_layer(traces=False)
    call = layer.functions[0].steps[1]
    layer.functions[0] = dataclasses.replace(layer.functions[0], steps=(
        layer.functions[0].steps[0], dataclasses.replace(call, args=call.args[:2]),
        layer.functions[0].steps[2]))
    assert residual.fuse_residuals(layer) == layer


def test_numpy_and_what_is_no_residual_sum_of_a_norm_stay_as_written():
    post = module_of(assign("Z", norm("layer_norm", residual_sum(), GAMMA, BETA)))
    assert residual.fuse_residuals(post) == post                          # NumPy: unfused
    row = param("r", D)                                                   # broadcast: copied
    scalar = ir.Tensor(ir.BinOp("+", Y, ir.Scalar(D)), Shape((B, T, D)), "float")
    steps = (assign("Z1", norm("layer_norm", residual_sum(Y, row), GAMMA, BETA)),
             assign("Z2", norm("rms_norm", scalar, GAMMA)),
             assign("Z3", norm("softmax", residual_sum())),
             assign("Z4", ir.call(ir.Runtime("rms_norm"), ir.BinOp("-", Y, A), GAMMA, EPS)))
    assert only_steps(residual.fuse_residuals(module_of(*steps, backend_name="cupy"))) == steps
    # a sum that the next step does not normalise, or that the norm reads twice
    apart = pre_norm_layer()
    body = apart.functions[0].steps
    apart.functions[0] = dataclasses.replace(apart.functions[0],
                                             steps=(body[0], body[2], body[1]))
    assert residual.fuse_residuals(apart).functions[0].steps == (body[0], body[2], body[1])
    twice = module_of(ir.Assign((ir.Name("Z_1"),), residual_sum()),
                      assign("Z", norm("rms_norm", ir.Name("Z_1"), ir.Name("Z_1"))),
                      backend_name="cupy")
    assert residual.fuse_residuals(twice) == twice


def test_a_gated_product_is_one_pass_over_its_two_products():
    gate = ir.Tensor(ir.call(PROJECT, X, W, activation=ir.Runtime("silu")), Shape((B, T, F)),
                     "float")
    other = ir.Tensor(ir.call(PROJECT, X, param("V", D, F)), Shape((B, T, F)), "float")
    for value in (ir.BinOp("*", gate, other), ir.BinOp("*", other, gate)):
        out = fusion.fuse_projections(module_of(assign("U", value)))
        assert rendered(out) == '# B T d_ff\nU = rt.glu(rt.project(X, params["W"]), ' \
            'rt.project(X, params["V"]), activation=rt.silu)'
    wider = ir.Tensor(ir.call(PROJECT, X, param("V", D, D)), Shape((B, T, D)), "float")
    steps = (assign("U1", ir.BinOp("*", gate, wider)),             # two shapes: broadcast
             assign("U2", ir.BinOp("*", gate, gate)),              # both activated
             assign("U3", ir.BinOp("*", other, other)),            # neither
             assign("U4", ir.BinOp("*", gate, b)),                 # no product
             assign("U5", ir.BinOp("+", gate, other)))
    assert only_steps(fusion.fuse_projections(module_of(*steps))) == steps


def core(form: bool = True) -> ir.AttentionCore:
    q, k = tensor("Q_h", B, T, D, family=H), tensor("K_h", B, T, D, family=H)
    v, mask = tensor("V_h", B, T, D, family=H), tensor("L_h", B, T, T, family=H)
    shape = Shape((B, T, D), H)
    scores = ir.BinOp("+", ir.BinOp("@", q, ir.call(ir.Attribute(k, "swapaxes"),
                                                     ir.Literal(-1), ir.Literal(-2))), mask)
    steps = (ir.Assign((ir.Name("S_h"),), scores, ir.Comment(Shape((B, T, T), H))),
             ir.Assign((ir.Name("A_h"),), ir.call(ir.Runtime("softmax"), ir.Name("S_h")),
                       ir.Comment(Shape((B, T, T), H))),
             ir.Assign((ir.Name("O_h"),), ir.BinOp("@", ir.Name("A_h"), v), ir.Comment(shape)))
    return ir.AttentionCore("S_h", "A_h", "O_h", mask, steps,
                            ir.AttentionForm(q, k, v, mask, True, shape) if form else None)


@pytest.mark.parametrize("backend_name, helper", [("numpy", "attend_in_blocks"),
                                                  ("cupy", "attend_fused")])
def test_the_attention_strategy_is_the_backends(backend_name, helper):
    before = core()
    (after,) = only_steps(attention.choose_strategy(module_of(before, backend_name=backend_name)))
    assert after.steps == before.steps                      # the equations, as written
    assert after.strategy == ir.AttentionStrategy(
        backend(backend_name).attention_note,
        ir.Call(ir.Runtime(helper), (before.form.q, before.form.k, before.form.values,
                                     before.form.mask)),
        before.form.shape)


def test_a_core_without_the_form_keeps_its_equations_alone():
    assert only_steps(attention.choose_strategy(module_of(core(form=False)))) == \
        (core(form=False),)


def test_an_output_that_is_no_family_is_not_stored_side_by_side():
    single = core()
    single = dataclasses.replace(single, form=dataclasses.replace(single.form,
                                                                  side_by_side=False))
    (after,) = only_steps(attention.choose_strategy(module_of(single)))
    assert after.strategy.call.keywords == (ir.Keyword("side_by_side", ir.Literal(False)),)


def test_masked_scores_are_kept_at_minus_infinity_right_after_the_scores():
    before = core()
    (after,) = only_steps(attention.keep_masked(module_of(before)))
    assert [type(s).__name__ for s in after.steps] == ["Assign", "KeepMasked", "Assign",
                                                       "Assign"]
    assert after.steps[1] == ir.KeepMasked(ir.Name("S_h"), before.mask)
    assert attention.keep_masked(module_of(after)).functions[0].steps == (after,)  # once


def test_an_entry_function_with_a_footprint_checks_it_first():
    footprint = ir.Footprint(Activations(B * T * D), (), ir.Name("itemsize"), 8, 1)
    read = ir.Assign((ir.Name("d"),), ir.Subscript(ir.Attribute(ir.Name("X"), "shape"),
                                                   (ir.Literal(-1),)))
    module = module_of(assign("Y", PRODUCT))
    entry = dataclasses.replace(module.functions[0], prologue=(read,), footprint=footprint)
    other = dataclasses.replace(entry, name="helper", footprint=None)
    module = dataclasses.replace(module, functions=[entry, other])
    out = memory.guard_memory(module)
    assert out.functions[0].prologue == (read, ir.MemoryGuard("block", footprint))
    assert out.functions[1] == other
    (limit,) = out.constants
    assert (limit.name, limit.value) == ("MEMORY_LIMIT", None)
    assert memory.guard_memory(out) == out                  # once
    assert memory.guard_memory(module_of(assign("Y", PRODUCT))).constants == []


def test_lower_applies_every_pass_and_none_on_request():
    choices = generate.BUILTIN_MODELS["decoder_only"]
    raw = lower(SPEC, choices, backend("numpy"), rewrites=())
    done = lower(SPEC, choices, backend("numpy"))
    kinds = {type(r).__name__ for r in ir.walk(raw.functions)}
    assert not kinds & {"KeepMasked", "AttentionStrategy", "MemoryGuard"}
    again = raw
    for rewrite in passes.PASSES:
        again = rewrite(again)
    assert again == done
    assert any(isinstance(r, ir.Keyword) and r.name == "activation"
               for r in ir.walk(done.functions))


# -- the printer

@pytest.mark.parametrize("expr, text", [
    (ir.BinOp("-", ir.Name("a"), ir.BinOp("-", ir.Name("b"), ir.Name("c"))), "a - (b - c)"),
    (ir.BinOp("-", ir.BinOp("-", ir.Name("a"), ir.Name("b")), ir.Name("c")), "a - b - c"),
    (ir.BinOp("@", ir.BinOp("+", ir.Name("a"), ir.Name("b")), ir.Name("c")), "(a + b) @ c"),
    (ir.BinOp("/", ir.Name("x"), ir.Scalar(sympy.sqrt(D))), "x / math.sqrt(d)"),
    (ir.BinOp("*", ir.Name("x"), ir.Scalar(D + 1)), "x * (d + 1)"),
    (ir.BinOp("**", ir.Neg(ir.Name("x")), ir.Scalar(sympy.Integer(5))), "(-x) ** (5)"),
    (ir.BinOp("-", ir.Name("n"), ir.Dim(D + F)), "n - (d + d_ff)"),
    (ir.Dim(D / H), "d // H"),
    (ir.Subscript(ir.BinOp("+", ir.Name("a"), ir.Name("b")), (ir.Slice(), ir.Literal(None))),
     "(a + b)[:, None]"),
    (ir.call(ir.ArrayModule("concatenate"), ir.List((ir.Name("a"), ir.Name("b"))),
             axis=ir.Literal(1)), "np.concatenate([a, b], axis=1)"),
    (ir.call(ir.ArrayModule("einsum"), ir.Literal("ij->ji", repr_quotes=True), ir.Name("a")),
     "np.einsum('ij->ji', a)"),
    (ir.Subscript(ir.Name("x"), (ir.Literal(...), ir.Literal(0), ir.Slice())), "x[..., 0, :]"),
    (ir.item(ir.Name("params"), "W"), 'params["W"]'),
])
def test_the_printer_places_exactly_the_parentheses_needed(expr, text):
    assert Printer("np")(expr) == text


def test_the_printer_notes_the_standard_modules_dims_call():
    printer = Printer("np")
    printer(ir.Dim(D / H))
    assert printer.modules == set()
    printer(ir.Scalar(sympy.sqrt(D)))
    assert printer.modules == {"math"}


def test_names_are_identifiers():
    for make in (lambda: ir.Name("x = 1"), lambda: ir.Runtime("f()"),
                 lambda: ir.Attribute(ir.Name("x"), "y.z"), lambda: ir.Keyword("a=b", X),
                 lambda: ir.CallBlock(("Y",), "f(x)", (), ())):
        with pytest.raises(CodegenError, match="is not a Python identifier"):
            make()


# -- every record of every built-in module is data

# the str fields that hold prose for comments and docstrings, or a jaxtyping axis string:
# every other str field of a record holds a name, which must be an identifier
PROSE = {("Function", "summary"), ("Function", "source"), ("Function", "where"),
         ("Function", "notes"),
         ("EquationDoc", "plain"), ("EquationDoc", "where"),
         ("Parameter", "meaning"), ("Field", "meaning"), ("ParamsClass", "doc"),
         ("Comment", "before"), ("Comment", "after"), ("AttentionStrategy", "note"), ("AttentionCore", "unblocked"), ("Fused", "note"),
         ("ArrayType", "axes"), ("Constant", "comment"), ("EntryRules", "requires"), ("Literal", "value"),
         ("Number", "spelling")}


# the built-in spec's modules, by name: each lowered when a test first asks for it (not at
# collection)
BUILT_IN = [f"{backend_name}/{name}" for name in generate.BUILTIN_MODELS
            for backend_name in ("numpy", "cupy")] + ["decoding"]


@functools.cache
def built_in_module(name: str):
    if name == "decoding":
        return lower(SPEC, {"arch": "encoder_decoder", "decoding": "step"}, backend("numpy"))
    backend_name, model = name.split("/")
    return lower(SPEC, generate.BUILTIN_MODELS[model], backend(backend_name))


def strings(record, owner=None, field=None):
    """Every str inside a record with the record and field it sits in."""
    if isinstance(record, str):
        yield owner, field, record
    elif isinstance(record, (list, tuple)):
        for each in record:
            yield from strings(each, owner, field)
    elif isinstance(record, dict):
        for key, value in record.items():
            yield from strings(key, owner, field)
            yield from strings(value, owner, field)
    elif dataclasses.is_dataclass(record) and type(record).__module__ == ir.__name__:
        for each in dataclasses.fields(record):
            yield from strings(getattr(record, each.name), type(record).__name__, each.name)


@pytest.mark.parametrize("name", BUILT_IN)
def test_no_record_holds_python_text(name):
    """A name is an identifier; the prose fields are the only other text. Python text in a
    record (``rt.project(X, W)``, ``d_k = Q_h.shape[-1]``) fails here."""
    module = built_in_module(name)
    records = module.functions + module.params_classes + module.constants
    found = list(strings(records))
    assert found
    for owner, field, text in found:
        if (owner, field) in PROSE or (owner, field) == ("Constant", "value"):
            continue                    # CACHE_STATES's keys and tensors are names too
        if (owner, field) == ("BinOp", "op"):
            assert text in ir.OPERATORS, (name, text)
            continue
        assert ir.IDENTIFIER.match(text), (name, owner, field, text)
    for owner, field, text in found:
        if (owner, field) == ("Constant", "value"):
            assert ir.IDENTIFIER.match(text), (name, text)


@pytest.mark.parametrize("name", BUILT_IN[:2])
def test_every_field_of_a_step_is_typed(name):
    """A step's fields hold expressions, shapes, comments, steps or names, never bare text
    beside a declared record type."""
    module = built_in_module(name)
    for record in ir.walk(module.functions):
        if not isinstance(record, (ir.Step, ir.Expr)):
            continue
        hints = typing.get_type_hints(type(record))
        for each in dataclasses.fields(record):
            value = getattr(record, each.name)
            if hints[each.name] in (ir.Expr, Shape, ir.Comment, ir.Step):
                assert isinstance(value, hints[each.name]), (record, each.name)
            if hints[each.name] == tuple[ir.Expr, ...]:
                assert all(isinstance(v, ir.Expr) for v in value), (record, each.name)


def test_every_step_kind_has_its_view_and_its_macro():
    macros = render_module.environment().get_template("steps.py.j2").module
    kinds = [kind for kind in vars(ir).values()
             if isinstance(kind, type) and issubclass(kind, ir.Step) and kind is not ir.Step]
    assert len(kinds) >= 10
    for kind in kinds:
        assert callable(getattr(macros, kind.__name__, None)), kind.__name__
        assert callable(getattr(StepRenderer, "_" + kind.__name__, None)), kind.__name__


# -- unknown kinds

@dataclasses.dataclass(frozen=True)
class Mystery(ir.Step):
    """A step kind no macro knows."""


@dataclasses.dataclass(frozen=True)
class Riddle(ir.Expr):
    """An expression kind the printer does not know."""


def with_extra(step: ir.Step):
    def rewrite(module: ir.Module) -> ir.Module:
        entry = module.functions[0]
        functions = [dataclasses.replace(entry, steps=(step, *entry.steps)),
                     *module.functions[1:]]
        return dataclasses.replace(module, functions=functions)
    return rewrite


def test_an_unknown_step_kind_is_a_codegen_error():
    module = lower(SPEC, {}, backend("numpy"), rewrites=(*passes.PASSES, with_extra(Mystery())))
    with raises(CodegenError, "internal error: no view or macro for the step kind Mystery "
                "(codegen/templates/steps.py.j2); please report it"):
        render_module.render(module)


def test_an_unknown_expression_kind_is_a_codegen_error():
    step = ir.Assign((ir.Name("x"),), Riddle())
    module = lower(SPEC, {}, backend("numpy"), rewrites=(with_extra(step),))
    with raises(CodegenError, "internal error: the printer knows no expression Riddle; "
                "please report it"):
        render_module.render(module)


def test_an_op_whose_code_rule_gives_text_is_a_codegen_error(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Textual(catalogue.Elementwise):
        def code(self, ctx, args, attrs):
            return f"rt.relu({args[0].expr})"

    monkeypatch.setitem(catalogue.OPS, "relu", Textual(
        "relu", "max(0, x)", latex_name="\\mathrm{ReLU}", per_element=1, spelling="relu",
        helper="relu", row_wise=True, activation=True))
    text = ('dim B "batch"\ndim d "width"\ninput X "B d"\nY "B d" = relu(X)\n'
            'output Y\n')
    with raises(CodegenError, "t.tspec:4: t: op relu's code rule gave str, not an expression: "
                "build it through its context (ctx.call, ctx.operator ...) in "
                "spec/ops/catalogue.py"):
        lower(parse(text, file="t.tspec"), {}, backend("numpy"))


def test_a_module_imports_what_its_records_call_for():
    text = generate.source(parse('dim B "batch"\ndim d "width"\ninput X "B d"\n'
                                 'Y "B d" = relu(X)\noutput Y\n', file="t.tspec"), {})
    head = text.split("from . import _runtime")[0]
    assert "import math" not in head and "Tuple" not in head and "TypedDict" not in head
    assert "from jaxtyping import Float\n" in head


def test_every_runtime_name_a_model_calls_is_in_its_runtime():
    """The runtime helpers the IR declares (Runtime records, and the step kinds that call
    one) are functions or names the backend's _runtime.py defines."""
    defined = {}
    for backend_name in ("numpy", "cupy"):
        runtime = ast.parse(render_module.render_runtime(backend(backend_name)))
        defined[backend_name] = {
            node.name for node in runtime.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))} | {
            target.id for node in runtime.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)}
    for name in BUILT_IN:
        module = built_in_module(name)
        used = ir.helpers_used(module)
        assert {"project", "record", "subtrace", "require_memory", "keep_masked"} <= used
        missing = used - defined[module.backend.name]
        assert not missing, (name, sorted(missing))
