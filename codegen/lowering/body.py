"""Lowering one block (or the model) to one IR function: its arguments and parameters, its
equations as ``Assign`` steps whose expressions come from the op catalogue (``Op.code``,
built through ``_Body``, the ``CodeContext`` of spec.ops), its block calls as ``CallBlock``,
``EachMember`` or ``StackLoop``, attention's three equations as an ``AttentionCore``, the dims
it reads where it starts, and, for an entry function, its footprint.

Dims a function needs (``d_k`` for the scale, ``T_dec`` for the causal mask) are read from
the shapes of its arrays where one carries them, computed from derived dims otherwise, and
taken as keyword arguments only when no array reveals them (``H``: a fused ``W_Q`` of width
``H*d_k`` cannot tell ``H`` from ``d_k``).

Layout: a family of H tensors (``[H] B T d_k``) is one array with the family axis first,
``(H, B, T, d_k)``; a single tensor passed where a family is expected gains a unit family axis
and is shared by every member.
"""

import dataclasses
from dataclasses import dataclass

import numpy
import sympy

from tspec.analysis.attention import AttentionCore, attention_core
from tspec.analysis.counts import BOOL_BYTES, INT_BYTES, Activations
from tspec.checking.order import topological
from tspec.codegen import ir
from tspec.codegen.backends import Backend, runtime_order
from tspec.codegen.lowering.spelling import Spelling
from tspec.errors import CodegenError
from tspec.files import shown, where
from tspec.language.model import (
    Block,
    BlockCall,
    Equation,
    OpNode,
    ScalarExpr,
    Spec,
    TensorDecl,
    TensorRef,
    Update,
    choices_in_force,
    declarations,
    local_binding,
    select,
    under,
)
from tspec.language.model import lets as derived_dims
from tspec.language.model import outputs as model_outputs
from tspec.ops.base import CATALOGUE, Operand, Unchecked, Value, numel
from tspec.ops.catalogue import OPS, SETTINGS
from tspec.symbolic.shape import Shape, format_expr

DTYPE_CLASS = {"float": "Float", "int": "Int", "bool": "Bool"}
PARAMS, CACHE, TRACE = ir.Name("params"), ir.Name("cache"), ir.Name("trace")
# the run-time settings (eps, theta, ...): one record of the module's Settings class, which an
# entry function makes from its keyword arguments and every block that reads one takes
SETTINGS_RECORD, SETTINGS_CLASS = ir.Name("settings"), ir.Name("Settings")


class Lowerer:
    def __init__(self, spec: Spec, choices: dict, backend: Backend,
                 rename: dict[str | None, str] | None = None,
                 spelling: Spelling | None = None):
        self.spec = under(spec, choices)    # the blocks and tensors renamed under the choices
        self.choices = choices
        self.backend = backend
        self.spelling = spelling or Spelling.of(spec)  # the spec's names as code writes them
        self.rename = rename or {}          # function names other than the block's (None: the
        #                                     model's entry)
        symbols = spec.symbols()
        self.lets = {symbols[let.dim]: let.expr for let in derived_dims(spec, choices)}
        self.functions: dict[str, tuple[ir.Function, _Signature]] = {}
        self.runtime = runtime_order(backend)       # the helpers of the backend's runtime
        self.needs = {helper.name: helper.needs for helper in self.runtime}
        self.params_classes: list[ir.ParamsClass] = []
        self.active: list[str] = []

    def module(self) -> ir.Module:
        entry, _ = self.lower_body(
            self.rename.get(None) or self.spelling.function(self.spec.name), None)
        functions = [f for f, _ in self.functions.values()]
        return ir.Module(
            spec_name=self.spec.name, title=self.spec.title,
            spec_file=shown(self.spec.file) if self.spec.file else "<spec>",
            spec_hash=self.spec.text_hash,
            choices=tuple(choices_in_force(self.spec, self.choices).items()),
            backend=self.backend,
            params_classes=self.params_classes, functions=functions, entry=entry.name)

    def function(self, block: Block) -> tuple[ir.Function, "_Signature"]:
        name = self.rename.get(block.name) or self.spelling.function(block.name)
        if name not in self.functions:
            self.lower_body(name, block)
        return self.functions[name]

    def lower_body(self, name: str, block: Block | None):
        if name in self.active:
            raise CodegenError(f"block {name} calls itself")
        self.active.append(name)
        builder = _Body(self, name, block)
        function, signature = builder.build()
        self.active.pop()
        self.functions[name] = (function, signature)
        return function, signature

    def use_helper(self, name: str) -> None:
        if name not in self.needs:
            raise CodegenError(f"code calls rt.{name}, which the {self.backend.name} runtime "
                               f"does not have: name it as an op's helper= in {CATALOGUE} "
                               "and write its template")


@dataclass
class _Signature:
    """What a caller must pass: keyword dims, and the run-time settings it reads (its callees'
    too), which it takes as one record."""
    dims: tuple[sympy.Symbol, ...]
    settings: tuple[str, ...]
    params_class: str | None
    output: TensorDecl | None     # None: the model's, when it names no output
    cache: bool = False           # takes its instance's key-value cache (states inside)
    takes_dtype: bool = False     # takes the float dtype (no float array of its own gives it)
    # the elements its tensors and its callees' hold at once, at most: one of these (``peaks``)
    peak: tuple[Activations, ...] = ()
    # dims its parameters or states (its callees' too) show, and where: (params or cache, the
    # path of keys to the array, the axis)
    deep: dict = dataclasses.field(default_factory=dict)


class _Body:
    """Builds one function: the model's body or one block's."""

    def __init__(self, lowerer: Lowerer, name: str, block: Block | None):
        self.lowerer = lowerer
        self.spec = lowerer.spec
        self.code = lowerer.spelling        # a spec name as code writes it
        self.name = name
        self.block = block
        self.batched_matmul = lowerer.backend.batched_matmul
        self.values: dict[str, Operand] = {}
        self.decls: dict[str, TensorDecl] = {}
        self.sources: dict[sympy.Symbol, ir.Expr] = {}
        self.sums: dict[sympy.Expr, tuple[ir.Expr, str, int]] = {}  # axes sized by a sum of
        #                                      dims: their size's expression, the array, the axis
        self.agreements: list[tuple[ir.Expr, sympy.Symbol, str, int]] = []  # a state's axes
        #                                      that another array reveals first: checked
        self.states = False                 # whether the function reads states of its own
        self.revealing: set[ir.Expr] = set()    # the sums that reveal a dim (not checked)
        self.needed: list[sympy.Symbol] = []
        self.needing: set[sympy.Symbol] = set()     # the same, to look up
        self.settings: list[str] = []   # the run-time settings it reads, its callees' too
        self.float_source: ir.Expr | None = None
        self.float_argument: ir.Expr | None = None  # a float input or parameter
        self.takes_dtype = False             # a dtype keyword: no float array in scope
        self.steps: list[ir.Step] = []
        self.traced: list[str] = []
        self.fields: list[ir.Field] = []
        self.equations: list[ir.EquationDoc] = []
        self.sources_text: list[str] = []
        self.record = None                  # the equation being lowered, for errors
        self.cache = False                  # whether the function takes a cache
        self.core: AttentionCore | None = None  # the body's attention core, if it is one
        self.updates: dict[str, str] = {}   # a value the next call's state takes -> the state
        # elements of the tensors the body's own equations compute, by dtype class: the
        # spec's activation count (spec.counts) for this function, checked before it runs
        # (the terms, summed once: adding them one by one is quadratic in their number)
        self.allocated: dict[str, list] = {"float": [], "int": [], "bool": []}
        self.peaks: list[Activations] = []  # what each call holds at most, in this body's dims
        self.deep: dict[sympy.Symbol, tuple[str, tuple, int]] = {}   # _Signature.deep

    # -- the CodeContext protocol of spec.ops
    def helper(self, name: str) -> ir.Expr:
        self.lowerer.use_helper(name)
        return ir.Runtime(name)             # from . import _runtime as rt

    def array_function(self, name: str, op: str) -> ir.Expr:
        if not callable(getattr(numpy, name, None)):    # CuPy's functions are NumPy's
            raise CodegenError(f"op {op} calls {self.lowerer.backend.alias}.{name}, which "
                               "NumPy (and so CuPy) does not have: fix its array_function= "
                               f"in {CATALOGUE}")
        return ir.ArrayModule(name)

    def dim(self, expr) -> ir.Expr:
        expr = sympy.sympify(expr)
        self.need(expr)
        return ir.Dim(self.code.dims(expr))

    def scalar(self, expr) -> ir.Expr:
        expr = sympy.sympify(expr)
        self.need(expr)
        return ir.Scalar(self.code.dims(expr))

    def dtype(self) -> ir.Expr:
        if self.float_source is None:       # no float array to take it from: the caller's
            self.takes_dtype = True
            return ir.Name("dtype")
        return ir.Attribute(self.float_source, "dtype")

    def setting(self, name: str) -> ir.Expr:
        """A run-time setting (eps), read from the settings record: an entry function makes it
        from its keyword arguments, a block takes it from its caller."""
        if name not in self.settings:
            self.settings.append(name)
        return ir.Attribute(SETTINGS_RECORD, name)

    def call(self, function, *args, **keywords) -> ir.Expr:
        return ir.call(function, *args, **keywords)

    def operator(self, symbol: str, left, right) -> ir.Expr:
        return ir.BinOp(symbol, left, right)

    def negate(self, operand) -> ir.Expr:
        return ir.Neg(operand)

    def index(self, value, *items) -> ir.Expr:
        return ir.Subscript(value, items)

    def attribute(self, value, name: str) -> ir.Expr:
        return ir.Attribute(value, name)

    def literal(self, value) -> ir.Expr:
        return ir.Literal(value)

    def pattern(self, text: str) -> ir.Expr:
        return ir.Literal(text, repr_quotes=True)

    def every(self) -> ir.Expr:
        return ir.Slice()

    def items(self, *values) -> ir.Expr:
        return ir.List(values)

    def atomic(self, expr) -> bool:
        return ir.precedence(expr) == ir.ATOM

    def error(self, message: str) -> CodegenError:
        record = self.record
        return CodegenError(f"{self.name}: {message}", file=getattr(record, "file", None),
                            line=getattr(record, "line", None))

    def grows(self, operand: Operand) -> bool:
        return self.extends(self.record) and operand.value.tensor == self.record.expr.args[0].name

    def extends(self, record) -> bool:
        """Whether the equation is ``S_all = concat(S, new)`` of a state S that S_all replaces
        (``S <- S_all``), in a backend that keeps such states in buffers with room to grow:
        its code is ``extend(S, new)``."""
        expr = getattr(record, "expr", None)
        return self.lowerer.backend.growing_states and isinstance(record, Equation) and \
            isinstance(expr, OpNode) and expr.op == "concat" and \
            isinstance(expr.args[0], TensorRef) and \
            self.updates.get(record.output) == expr.args[0].name

    def need(self, expr) -> None:
        for symbol in sorted(sympy.sympify(expr).free_symbols, key=str):
            if symbol not in self.needing:
                self.needed.append(symbol)
                self.needing.add(symbol)

    # -- building
    def build(self) -> tuple[ir.Function, _Signature]:
        spec, block = self.spec, self.block
        statements = select(block.body if block else spec.body, self.lowerer.choices)
        self.decls, inputs = declarations(statements, block)
        arguments = []
        self.bound: set[str] = set()       # dim names the arguments so far bind in jaxtyping
        for decl in inputs:
            shape = self.require_shape(decl)
            ref = ir.Name(self.code(decl.name))
            self.values[decl.name] = Operand(ir.Tensor(ref, shape, decl.dtype),
                                             Value(shape, decl.dtype, tensor=decl.name))
            arguments.append(ir.Argument(ref.id, self.annotation(decl, shape, self.bound),
                                         shape))
            self.bound |= {str(d) for d in shape.dims + (shape.family,)
                           if isinstance(d, sympy.Symbol)}
            self.add_sources(ref, shape, family_source=False)
            if decl.dtype == "float" and self.float_source is None:
                self.float_source = self.float_argument = ref
        for decl in self.decls.values():
            if decl.role == "param":
                shape = self.require_shape(decl)
                ref = ir.item(PARAMS, decl.name)
                self.values[decl.name] = Operand(ir.Tensor(ref, shape, decl.dtype),
                                                 Value(shape, decl.dtype, tensor=decl.name))
                self.fields.append(ir.Field(decl.name, self.annotation(decl, shape),
                                            decl.meaning))
                self.add_sources(ref, shape, family_source=True, deep=("params", decl.name))
                if decl.dtype == "float" and self.float_source is None:
                    self.float_source = self.float_argument = ref
            elif decl.role == "state":
                shape = self.require_shape(decl)
                ref = ir.item(CACHE, decl.name)
                self.values[decl.name] = Operand(ir.Tensor(ref, shape, decl.dtype),
                                                 Value(shape, decl.dtype, tensor=decl.name))
                self.add_sources(ref, shape, family_source=True, state=decl.name,
                                 deep=("cache", decl.name))
                self.cache = self.states = True
        producers = self.producers = {s.output: s for s in statements
                                      if isinstance(s, (Equation, BlockCall))}
        self.updates = {s.value: s.state for s in statements if isinstance(s, Update)}
        core = self.core = attention_core(block, producers, self.decls)
        for record in topological(producers, self.name):
            if record.source and record.source not in self.sources_text:
                self.sources_text.append(record.source)
            self.record = record
            if isinstance(record, Equation):
                self.equation(record)
            else:
                self.block_call(record)
        if core is not None:
            self.steps = [ir.AttentionCore(
                self.code(core.scores), self.code(core.weights), self.code(block.output),
                self.values[core.mask].expr,
                tuple(self.steps), self.attention_form(core, producers[core.scores],
                                                       producers[block.output]))]
        for update in (s for s in statements if isinstance(s, Update)):
            shape = self.values[update.value].value.shape
            self.steps.append(ir.CacheUpdate(update.state, self.code(update.value), shape))
            self.equations.append(ir.EquationDoc(
                f"{update.state} <- {update.value} (the next step's)", where(update)))
        outputs = [block.output] if block else model_outputs(spec, self.lowerer.choices)
        for name in outputs:            # a parameter or state returned as it is: named first
            operand = self.values.get(name)
            if operand is not None and ir.unwrap(operand.expr) != ir.Name(self.code(name)):
                self.steps.append(ir.Assign((ir.Name(self.code(name)),), operand.expr,
                                            ir.Comment(shape=operand.value.shape)))
        return self.finish(arguments, outputs)

    def attention_form(self, core: AttentionCore, scores: Equation,
                       output: Equation) -> ir.AttentionForm | None:
        """An attention core's scores as q @ k.T + L, q over the query rows and k over the
        keys, or as f(q @ k.T) + L for a chain f of element-wise ops (``core.chain``), with V
        and L: what a strategy (``codegen.passes.attention``) computes them from, a block of
        query rows or the scores and weights at once. f is a function of a block's product
        and its rows and keys (``ir.Lambda``), reading the biases over rows and keys at the
        block's. None for any other scores (computed as written: the same numbers, slower)."""
        self.record = scores
        left = scores.expr.args[0]
        chain = None
        if not core.chain and (left is core.product or isinstance(left, OpNode) and
                               left.op == "scale" and left.args[0] is core.product):
            product = _scale_the_left_factor(left)      # q @ k.T + L: no chain to apply
        else:
            chain = self.score_chain(core, scores)
            if chain is None:
                return None
            product = chain[0]
        if not (isinstance(product, OpNode) and product.op == "matmul" and
                isinstance(product.args[1], OpNode) and product.args[1].op == "transpose"):
            return None
        q, k = self.operand(product.args[0]), self.operand(product.args[1].args[0])
        values = self.values[output.expr.args[1].name]
        mask = self.values[core.mask]
        called = ir.unwrap(self.operand(product).expr)
        batched = ir.Runtime(self.batched_matmul) if self.batched_matmul else None
        if isinstance(called, ir.Call) and called.function != batched or not all(
                _along(operand.value.shape, axis, {core.rows, core.keys})
                for operand, axis in ((q, core.rows), (k, core.keys), (values, core.keys))):
            return None
        out = self.values[output.output].value.shape
        # no heads to store side by side where the output is no family
        return ir.AttentionForm(q.expr, k.expr, values.expr, mask.expr,
                                side_by_side=out.family is not None, shape=out,
                                scores=None if chain is None else chain[1],
                                chain=() if chain is None else chain[2],
                                scores_shape=self.values[core.mask].value.shape)

    def score_chain(self, core: AttentionCore, scores: Equation):
        """The product q @ k.T a chain starts from (a scale right around it put on q), the
        chain as a function of a block's product, rows and keys, and the chain's ops,
        outermost first, each once (``("scale", "tanh")``, for a note): None where it cannot
        be written so (a chain equation computed on its own, which the function would
        repeat)."""
        parameters = ("S", "rows", "keys")
        extras = {name: self.values[name] for name in core.extras}
        if any(self.code(name) in parameters for name in core.extras):
            parameters = ("S_block", "rows_block", "keys_block")
        product = core.product
        found: list = []
        ops: list[str] = []

        def rebuilt(term):
            if isinstance(term, OpNode) and term is not product and term.op not in ops:
                ops.append(term.op)
            if isinstance(term, OpNode) and term.op == "scale" and term.args[0] is product:
                found.append(_scale_the_left_factor(term))
                return TensorRef(parameters[0])
            if term is product:
                found.append(product)
                return TensorRef(parameters[0])
            if isinstance(term, TensorRef) and term.name in core.chain:
                return rebuilt(self.producers[term.name].expr)
            if isinstance(term, OpNode):
                return dataclasses.replace(term, args=tuple(rebuilt(a) for a in term.args))
            return term

        body = rebuilt(scores.expr.args[0])
        if len(found) != 1:
            return None
        saved = {name: self.values.get(name) for name in (parameters[0], *extras)}
        block = self.operand(found[0]).value.shape
        self.values[parameters[0]] = Operand(ir.Tensor(ir.Name(parameters[0]), block, "float"),
                                             Value(block, "float", tensor=parameters[0]))
        for name, operand in extras.items():
            shape = operand.value.shape
            if set(shape.dims) & {core.rows, core.keys}:
                sliced = ir.Subscript(ir.unwrap(operand.expr), (
                    ir.Literal(Ellipsis), ir.Name(parameters[1]), ir.Name(parameters[2])))
                self.values[name] = Operand(ir.Tensor(sliced, shape, operand.value.dtype),
                                            operand.value)
        try:
            code = self.operand(body).expr
        finally:
            for name, operand in saved.items():
                if operand is None:
                    self.values.pop(name, None)
                else:
                    self.values[name] = operand
        return found[0], ir.Lambda(parameters, code), tuple(ops)

    def require_shape(self, decl: TensorDecl) -> Shape:
        if decl.shape is None:
            raise CodegenError(f"{decl.role} {decl.name} has no stated shape; code needs one",
                               file=decl.file, line=decl.line)
        return decl.shape

    def add_sources(self, ref: ir.Expr, shape: Shape, family_source: bool,
                    state: str | None = None, deep: tuple[str, str] | None = None) -> None:
        """Dims an array reveals: each plain-symbol axis, read from its shape; a sum of dims
        (``T_past + T_new``) reveals one of them once the others are known. A state's axis
        that an argument revealed first is checked against it where the function starts.
        ``deep``: the array is a parameter or a state (where it is: params or cache, its
        name), which reveals its dims to the callers' memory guards too."""
        if deep is not None:
            axes = [(dim, index - shape.rank) for index, dim in enumerate(shape.dims)]
            for dim, axis in axes + ([(shape.family, 0)] if family_source else []):
                if isinstance(dim, sympy.Symbol):
                    self.deep.setdefault(dim, (deep[0], (deep[1],), axis))
        name = state or (ref.id if isinstance(ref, ir.Name) else deep[1])
        for index, dim in enumerate(shape.dims):
            axis = index - shape.rank
            size = _axis_size(ref, axis)
            if isinstance(dim, sympy.Symbol) and dim not in self.sources:
                self.sources[dim] = size
            elif isinstance(dim, sympy.Symbol) and state is not None:
                self.agreements.append((size, dim, state, axis))
            elif isinstance(dim, sympy.Add) and dim not in self.sums:
                self.sums[dim] = (size, name, axis)
        if family_source and isinstance(shape.family, sympy.Symbol) and \
                shape.family not in self.sources:
            self.sources[shape.family] = _axis_size(ref, 0)

    def sum_revealing(self, symbol: sympy.Symbol) -> tuple[ir.Expr, sympy.Expr] | None:
        """An axis of size ``symbol + rest``, every dim of ``rest`` read from an array: its
        size's expression and ``rest``."""
        for total, (code, _, _) in self.sums.items():
            rest = total - symbol
            if symbol not in rest.free_symbols and total.coeff(symbol) == 1 and \
                    all(s in self.sources for s in rest.free_symbols):
                self.revealing.add(code)
                return code, rest
        return None

    def agreement_checks(self) -> list[ir.Step]:
        """Where a function reads states (a cache), the sizes its arguments and the cache
        both give must agree: a mask of the wrong length would otherwise be cut or broadcast
        silently. One ``require_size`` for each such axis."""
        if not self.states:
            return []
        checks: list[ir.Step] = []

        def check(what: str, actual: ir.Expr, name: str, expected: ir.Expr) -> None:
            checks.append(ir.Evaluate(ir.call(self.helper("require_size"), ir.text(what),
                                              actual, ir.text(name), expected)))

        for total, (code, name, axis) in self.sums.items():
            if code in self.revealing or not all(s in self.sources for s in total.free_symbols):
                continue
            check(f"{name} axis {axis}", code, format_expr(total).replace("+", " + "),
                  self.dim(total))
        for code, symbol, state, axis in self.agreements:
            check(f"cache {state} axis {axis}", code, str(symbol), self.dim(symbol))
        return checks

    def own(self) -> Activations:
        """The elements of the tensors the body's own equations compute, by dtype class."""
        return Activations(*(sympy.Add(*self.allocated[dtype])
                             for dtype in ("float", "int", "bool")))

    def footprint(self, largest: list[Activations]) -> ir.Footprint | None:
        """An entry function's footprint, which a memory guard checks: the elements of its
        own tensors and of the largest of its calls' (each call's own and its largest
        call's, down the tree), where a float array gives their item size and every dim they
        need is known without a keyword argument (the check never changes a function's
        signature); a dim only a callee's parameter or state shows is read from it where it
        lies in params or cache."""
        own = self.own()
        # the check runs first: a float array it takes (not one it computes) or its dtype
        # keyword gives the item size
        if self.float_argument is not None:
            itemsize = ir.Attribute(ir.Attribute(self.float_argument, "dtype"), "itemsize")
        elif self.takes_dtype:
            itemsize = ir.Attribute(ir.call(ir.ArrayModule("dtype"), ir.Name("dtype")),
                                    "itemsize")
        else:
            return None
        counted = [own] + largest
        symbols = {s for each in counted for part in (each.float, each.int, each.bool)
                   for s in sympy.sympify(part).free_symbols}
        if all(part == 0 for each in counted for part in (each.float, each.int, each.bool)) \
                or not all(self.knows(symbol) for symbol in sorted(symbols, key=str)):
            return None
        self.helper("require_memory")
        if len(largest) == 1:               # one call: its bytes and the body's, summed
            own, largest = own + largest[0], []
        return ir.Footprint(self.code.dims(own), tuple(map(self.code.dims, largest)),
                            itemsize, INT_BYTES, BOOL_BYTES,
                            dims=tuple(sorted(symbols, key=str)))

    def counted(self, footprint: ir.Footprint | None, arguments, keywords: list) -> \
            ir.Footprint | None:
        """The footprint with the function that counts it (``<name>_bytes``, after the
        model): it takes the entry function's arguments and reads every dim its sums name
        where the entry would; None where one would be a keyword the entry does not take."""
        if footprint is None:
            return None
        counting, asked = [], []
        resolve = self.resolver(set(), counting, asked)
        for symbol in footprint.dims:
            resolve(symbol)
        if not set(asked) <= set(keywords):
            return None
        names = [a.name for a in arguments] + (["params"] if self.fields else []) + \
            (["cache"] if self.cache else [])
        given = [self.code(str(s)) for s in keywords] + (["dtype"] if self.takes_dtype else [])
        return dataclasses.replace(footprint, function=self.code.count(self.name),
                                   arguments=tuple(names), keywords=tuple(given),
                                   prologue=tuple(counting))

    def knows(self, symbol, seen: frozenset = frozenset()) -> bool:
        """Whether a dim's value is at hand in the function without a keyword argument."""
        if symbol in self.sources or symbol in self.needing or symbol in self.deep:
            return True
        if symbol in self.lowerer.lets and symbol not in seen:
            return all(self.knows(inner, seen | {symbol})
                       for inner in self.lowerer.lets[symbol].free_symbols)
        return self.sum_revealing(symbol) is not None

    def annotation(self, decl: TensorDecl, shape: Shape,
                   bound: set[str] | None = None) -> ir.ArrayType:
        """jaxtyping's annotation: dims by name, the family axis first (#: may be shared).

        ``bound``: for a checked signature, the dim names earlier arguments bind; an axis
        written as an expression of other names becomes "_" (jaxtyping could not evaluate it).
        None: an unchecked annotation (a parameter container's field), written in full."""
        bound = None if bound is None else set(bound)
        axes = []
        if shape.family is not None:
            prefix = "#" if decl.role == "input" and self.block is not None else ""
            axes.append(prefix + format_expr(shape.family).replace(" ", ""))
        for dim in shape.dims:
            text = format_expr(dim).replace(" ", "")
            if bound is not None and not isinstance(dim, sympy.Symbol) and \
                    not dim.is_Integer and not {str(s) for s in dim.free_symbols} <= bound:
                text = "_"           # jaxtyping could not evaluate it yet: not checked
            if bound is not None and isinstance(dim, sympy.Symbol):
                bound.add(str(dim))
            axes.append(text)
        kind = DTYPE_CLASS[decl.dtype]
        # one axis gets a leading space: a bare name in a string reads as a forward reference
        # to linters (jaxtyping's own advice)
        text = " ".join(axes) if len(axes) > 1 else " " + "".join(axes)
        return ir.ArrayType(kind, text)

    def operand(self, term) -> Operand:
        if isinstance(term, TensorRef):
            return self.values[term.name]
        if isinstance(term, ScalarExpr):
            return Operand(None, Value(Shape(()), "float", scalar=term.expr))
        term = _scale_the_left_factor(term)
        args = [self.operand(a) for a in term.args]
        op = OPS[term.op]
        value = op.infer(Unchecked(self.name, CodegenError), [a.value for a in args], term.attr)
        expr = op.code(self, args, term.attr)
        if not isinstance(expr, ir.Expr):
            raise self.error(f"op {op.name}'s code rule gave {type(expr).__name__}, not an "
                             "expression: build it through its context (ctx.call, "
                             f"ctx.operator ...) in {CATALOGUE}")
        if value.shape is not None and not value.is_scalar:
            expr = ir.Tensor(expr, value.shape, value.dtype)
        return Operand(expr, value)

    def equation(self, record: Equation) -> None:
        result = self.operand(record.expr)
        declared = self.decls.get(record.output)
        shape = declared.shape if declared is not None and declared.shape is not None \
            else result.value.shape
        dtype = declared.dtype if declared is not None else result.value.dtype
        # extend's new buffer holds half as many entries again (templates/helpers/extend.py.j2)
        self.allocated[dtype].append(numel(Value(shape)) * (
            sympy.Rational(3, 2) if self.extends(record) else 1))
        self.assign(record.output, result.expr, shape, dtype)
        self.equations.append(ir.EquationDoc(f"{record.output} = {record.text}", where(record)))

    def assign(self, name: str, expr: ir.Expr | None, shape: Shape, dtype: str,
               step: ir.Step | None = None) -> None:
        ref = ir.Name(self.code(name))
        self.values[name] = Operand(ir.Tensor(ref, shape, dtype),
                                    Value(shape, dtype, tensor=name))
        self.steps.append(step or ir.Assign((ref,), expr, ir.Comment(shape)))
        self.traced.append(name)
        if dtype == "float" and self.float_source is None:
            self.float_source = ref

    def block_call(self, record: BlockCall) -> None:
        block = self.spec.blocks[record.block]
        function, signature = self.lowerer.function(block)
        operands = [self.values[name] for name in record.args]
        # a block that takes single tensors, called with families: applied to each member
        # (the checker allows it only for a call of one copy that keeps no states)
        family = next((o for o in operands if o.value.shape.family is not None), None) \
            if all(d.shape.family is None for d in block.inputs) else None
        args = []
        for decl, operand in zip(block.inputs, operands):
            shape = operand.value.shape
            expr = operand.expr
            if decl.shape.family is not None and shape.family is None:
                expr = ir.Subscript(expr, (ir.Literal(None),))  # one tensor, shared by all
            elif family is not None and shape.family is not None:
                expr = ir.Subscript(expr, (ir.Name("member"),))
            args.append(expr)
        binding = local_binding(block, [self.values[name].value.shape for name in record.args])
        self.peaks += [peak.subs(binding) for peak in signature.peak]
        prefix = (record.instance,) + ((0,) if record.repeat is not None else ())
        local = {dim.symbol for dim in block.local_dims.values()}
        for symbol, (root, path, axis) in signature.deep.items():
            found = (root, prefix + path, axis)
            if symbol not in local and (symbol not in self.deep or
                                        _lists(found) < _lists(self.deep[symbol])):
                self.deep[symbol] = found
        keywords = [ir.Keyword(self.code(str(d)), self.dim(d)) for d in signature.dims]
        for name in signature.settings:
            self.setting(name)
        settings = [SETTINGS_RECORD] if signature.settings else []
        if signature.takes_dtype:
            keywords.append(ir.Keyword("dtype", self.dtype()))
        out_decl = self.decls.get(record.output)
        shape = out_decl.shape if out_decl is not None and out_decl.shape is not None \
            else signature.output.shape.subs(binding)
        if family is not None and shape.family is None:
            shape = Shape(shape.dims, family.value.shape.family)
        dtype = signature.output.dtype
        instance = record.instance
        output = self.code(record.output)
        has_params = signature.params_class is not None
        self.cache |= signature.cache
        subtrace = self.helper("subtrace")
        here = ir.text(instance)
        if family is not None:
            params = [ir.item(PARAMS, instance)] if has_params else []
            trace = ir.Keyword("trace", ir.call(subtrace, TRACE, here, ir.Name("member")))
            call = ir.CallBlock((), function.name, tuple(args + params + settings),
                                tuple(keywords) + (trace,))
            self.assign(record.output, None, shape, dtype,
                        ir.EachMember(output, family.expr, call, shape))
        elif record.repeat is None:
            params = [ir.item(PARAMS, instance)] if has_params else []
            params += [ir.item(CACHE, instance)] if signature.cache else []
            trace = ir.Keyword("trace", ir.call(subtrace, TRACE, here))
            self.assign(record.output, None, shape, dtype, ir.CallBlock(
                (output,), function.name, tuple(args + params + settings),
                tuple(keywords) + (trace,), ir.Comment(shape)))
        else:
            first, rest = args[0], args[1:]
            i = ir.Name("i")
            trace = ir.Keyword("trace", ir.call(subtrace, TRACE, here, i))
            positional = [ir.Name(output)] + rest + \
                ([ir.Name("layer")] if has_params else []) + \
                ([ir.Subscript(ir.item(CACHE, instance), (i,))] if signature.cache else []) + \
                settings
            layers = None if has_params else self.dim(record.repeat)
            call = ir.CallBlock((output,), function.name, tuple(positional),
                                tuple(keywords) + (trace,))
            ref = ir.Name(output)
            self.values[record.output] = Operand(ir.Tensor(ref, shape, dtype),
                                                 Value(shape, dtype, tensor=record.output))
            self.steps.append(ir.StackLoop(output, first, shape, instance, layers, call))
            self.traced.append(record.output)
        if has_params:
            kind = ir.PlainType("list", signature.params_class) if record.repeat is not None \
                else ir.PlainType(signature.params_class)
            count = f"{format_expr(record.repeat)} copies of " if record.repeat is not None \
                else ""
            self.fields.append(ir.Field(instance, kind, f"{count}{function.name}"))
        renamed = f"  (calls {function.name})" if function.name != block.name else ""
        self.equations.append(ir.EquationDoc(f"{record.output} = {record.text}{renamed}",
                                             where(record)))

    def resolver(self, body: set, prologue: list, keywords: list):
        """``resolve(symbol)``: the statements that give a dim where a function starts,
        appended to ``prologue``, the dims it reads first before it: from an array's shape,
        as a derived dim, as a sum less its known part, from a parameter or state (only for a
        dim outside ``body``, the dims the function's own statements use), else a keyword
        argument (appended to ``keywords``)."""
        done = set()

        def resolve(symbol):
            if symbol in done:
                return
            done.add(symbol)
            name = (ir.Name(self.code(str(symbol))),)
            if symbol in self.sources:
                prologue.append(ir.Assign(name, self.sources[symbol]))
            elif symbol in self.lowerer.lets:
                expr = self.lowerer.lets[symbol]
                for inner in sorted(expr.free_symbols, key=str):
                    resolve(inner)
                prologue.append(ir.Assign(name, self.dim(expr)))
            elif (found := self.sum_revealing(symbol)) is not None:
                total, rest = found
                for inner in sorted(rest.free_symbols, key=str):
                    resolve(inner)
                prologue.append(ir.Assign(name, ir.BinOp("-", total, self.dim(rest))))
            elif symbol in self.deep and symbol not in body:
                prologue.append(ir.Assign(name, _deep_expr(*self.deep[symbol])))
            else:
                keywords.append(symbol)
        return resolve

    def finish(self, arguments, outputs) -> tuple[ir.Function, _Signature]:
        # dims the body uses: from array shapes, from derived dims, else keyword arguments
        prologue, keywords = [], []
        body = set(self.needed)
        resolve = self.resolver(body, prologue, keywords)
        largest = _largest(self.peaks)
        footprint = self.footprint(largest) if self.block is None else None
        index = 0
        while index < len(self.needed):      # resolving may need more dims
            resolve(self.needed[index])
            index += 1
        checks = self.agreement_checks()
        while index < len(self.needed):      # and the checks may need more
            resolve(self.needed[index])
            index += 1
        prologue += checks
        dims = self.spec.dims
        keyword_records = [ir.Parameter(self.code(str(s)), ir.PlainType("int"), None, dims[str(s)].meaning
                                        if str(s) in dims else "") for s in keywords]
        if self.block is None:               # an entry: each setting a keyword argument
            keyword_records += [ir.Parameter(r, ir.PlainType("float"),
                                             ir.Number(SETTINGS[r].default), SETTINGS[r].meaning)
                                for r in self.settings]
            if self.settings:
                prologue.insert(0, ir.Assign((SETTINGS_RECORD,), ir.Call(
                    SETTINGS_CLASS, (), tuple(ir.Keyword(r, ir.Name(r)) for r in self.settings)),
                    ir.Comment(before="the settings, one record the blocks read")))
        if self.takes_dtype:
            keyword_records.append(ir.Parameter(
                "dtype", ir.PlainType("dtype"), ir.ArrayModule("float32"), "the float dtype "
                "of the tensors this function makes (no float array it takes has one to give)"))
        output_decls = [self.decls.get(o) or TensorDecl(o, "output", self.values[o].value.shape,
                                                        self.values[o].value.dtype)
                        for o in outputs]
        annotations = [self.annotation(d, self.values[d.name].value.shape, self.bound)
                       for d in output_decls]
        # a model with no `output` statement computes its tensors and returns nothing
        params_class = None
        if self.fields:
            params_class = self.code.params_class(self.name)
            self.lowerer.params_classes.append(ir.ParamsClass(
                params_class, f"Parameters of {self.name}, keyed by the spec's names.",
                tuple(self.fields)))
        block = self.block
        record = block or self.spec
        summary = model_summary(self.spec.title, "this module's") if block is None \
            else _summary(block)
        function = ir.Function(
            name=self.name, summary=summary, source="; ".join(self.sources_text),
            where=where(record), equations=tuple(self.equations),
            arguments=tuple(arguments), params_class=params_class, cache=self.cache,
            keywords=tuple(keyword_records), returns=tuple(annotations),
            settings=tuple(self.settings) if self.block is not None else (),
            prologue=tuple(prologue),
            steps=(*self.steps, *((ir.Record(tuple(self.traced),
                                             tuple(map(self.code, self.traced))),)
                                  if self.traced else ()),
                   ir.Return(tuple(map(self.code, outputs)))),
            footprint=self.counted(footprint, arguments, keywords))
        own = self.own()
        signature = _Signature(tuple(keywords), tuple(self.settings), params_class,
                               output_decls[0] if output_decls else None, self.cache,
                               self.takes_dtype,
                               tuple(own + each for each in largest) or (own,), self.deep)
        return function, signature


def _axis_size(ref: ir.Expr, axis: int) -> ir.Expr:
    """``ref.shape[axis]``."""
    return ir.Subscript(ir.Attribute(ref, "shape"), (ir.Literal(axis),))


def _scale_the_left_factor(term: OpNode) -> OpNode:
    """(A @ B) / c as (A / c) @ B: the same value, and in attention it scales the T x d_k
    queries instead of the T x T scores."""
    if term.op == "scale" and isinstance(term.args[0], OpNode) and term.args[0].op == "matmul":
        product = term.args[0]
        left = OpNode("scale", (product.args[0], term.args[1]), term.attrs, term.line,
                      term.column)
        return OpNode("matmul", (left, product.args[1]), product.attrs, product.line,
                      product.column)
    return term


def _largest(candidates: list[Activations]) -> list[Activations]:
    """The candidates a max must compare: each but those another is at least as large as in
    every term (dims are positive, so a polynomial whose every coefficient is at least
    another's is at least as large); the first of equal ones."""
    terms = [tuple(sympy.expand(getattr(c, dtype)).as_coefficients_dict()
                   for dtype in ("float", "int", "bool")) for c in candidates]

    def covers(big: tuple, small: tuple) -> bool:
        return all(b.get(m, 0) >= c for b, s in zip(big, small) for m, c in s.items()) and \
            all(b.get(m, 0) >= s.get(m, 0) for b, s in zip(big, small) for m in b)

    kept = []
    for index, mine in enumerate(terms):
        if not any(covers(other, mine) and (other != mine or at < index)
                   for at, other in enumerate(terms) if at != index):
            kept.append(candidates[index])
    return kept


def _lists(found: tuple[str, tuple, int]) -> int:
    """How many stacks of layers a path to a parameter or state goes through."""
    return sum(isinstance(key, int) for key in found[1])


def _deep_expr(root: str, path: tuple, axis: int) -> ir.Expr:
    """A dim read from an array in nested params or cache: where the path goes through a
    stack of layers, rt.axis_size (0 for an empty stack, whose layers then hold nothing)."""
    if _lists((root, path, axis)):
        return ir.call(ir.Runtime("axis_size"), ir.Name(root), *(ir.Literal(k) for k in path),
                       axis=ir.Literal(axis))
    array = ir.Name(root)
    for key in path:
        array = ir.item(array, key)
    return _axis_size(array, axis)


def _along(shape: Shape, axis: sympy.Symbol, axes: set) -> bool:
    """Whether ``axis`` is the shape's second-to-last axis and no other axis is among ``axes``:
    a block of its rows is ``x[..., rows, :]``."""
    return shape.rank >= 2 and shape.dims[-2] == axis and \
        not axes & set(shape.dims[:-2] + shape.dims[-1:])


def model_summary(title: str, whose: str) -> str:
    """The model's function (or docs section) named for what it computes: the spec under
    ``whose`` choices, which its title does not say (a title may name every architecture the
    spec's choices give)."""
    title = title.strip().rstrip(".")
    return f"{title}: the model under {whose} choices." if title else \
        f"The model under {whose} choices."


def _summary(block: Block) -> str:
    return block.name.replace("_", " ").capitalize() + "."
