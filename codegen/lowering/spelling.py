"""Spelling: the spec's names as generated code writes them, kept out of the code's own.

A generated module binds names of its own beside the spec's: its imports (``np``, ``rt``,
``Float``), constants (``RULES``, ``CACHE_STATES``), parameter classes (``FeedForwardParams``),
the decoding step's functions (``decoder_layer_step``, ``decode_step``, ``prefill``), and in
its functions arguments and locals (``params``, ``cache``, ``trace``, ``dtype``, ``layer``,
``i``) and the settings' keyword arguments (``eps``, ``theta``). A spec may name a tensor,
dim, block, input or state like any of these: that name is spelt with ``_`` after it (more
where the spec has that spelling too), everywhere the module writes it as Python. Every other
name is spelt as the spec writes it.

What a name means to the caller stays the spec's: trace and cache keys, parameter keys, shape
strings, messages and comments. A keyword dim spelt otherwise is named so in the signature;
``RULES["spelled"]`` (read by ``rt.entry``) and ``Spelling.spec_name`` map it back.
"""

import sympy

from tspec.language.model import (
    BlockCall,
    Equation,
    Let,
    Rename,
    Spec,
    TensorDecl,
    Update,
    every_record,
    step_function,
    tensor_names,
)
from tspec.ops.catalogue import SETTINGS

# The names a generated model module binds beside the spec's own and beside the functions and
# parameter classes it makes of the spec's blocks: imports, constants, and in its functions
# the arguments and locals. (tests/codegen/test_codegen.py holds the modules to this list.)
CODE_NAMES = frozenset({
    "rt", "np", "cp", "math", "Bool", "Float", "Int", "Tuple", "TypedDict", "MEMORY_LIMIT",
    "CACHE_STATES", "RULES", "prefill", "decode_step", "params", "cache", "trace", "dtype",
    "layer", "i", "member", "recorder", "staged", "annotations",
    "settings", "Settings", "SETTINGS", "NamedTuple",
})
ENTRY_STEP = step_function(None)        # the decoding step's entry function


class Spelling:
    """How one spec's names are spelt in the code generated from it, under any choices (the
    same for the full model and its decoding step, which share functions)."""

    def __init__(self, spec: Spec):
        names = spec_names(spec)
        functions = sorted(_function_names(spec))
        taken = names | set(functions) | CODE_NAMES | set(SETTINGS)

        def spelt(name: str, own: set) -> str:
            """``name``, or where it is one of ``own``, the first spelling with underscores
            after it that neither the spec nor the code has."""
            if name not in own:
                return name
            candidate = _apart(name + "_", taken)
            taken.add(candidate)
            return candidate

        # the module's functions first, against the code's own names; then every other name
        # against those, the functions and the parameter classes they make
        module_level = CODE_NAMES | set(SETTINGS)
        self.functions = {name: spelt(name, module_level) for name in functions}
        # a block's decoding step: <block>_step, or where a block the module makes a function
        # of has that name itself, with underscores after it
        self.steps: dict[str, str] = {}
        for name in functions:
            self.steps[name] = _apart(step_function(self.functions[name]), module_level,
                                      self.functions.values(), self.steps.values())
        made = {self.function(name, step, clashes) for name in functions
                for step, clashes in ((False, ()), (True, ()), (True, self.functions.values()))}
        made |= {ENTRY_STEP, "prefill"}
        self.classes: dict[str, str] = {}
        for function in sorted(made):
            self.classes[function] = _apart(params_class_name(function), taken,
                                            self.classes.values())
        # an entry function's memory count (the model's, the decoding step's): <function>_bytes
        self.counts: dict[str, str] = {}
        for function in sorted({self.function(spec.name), ENTRY_STEP}):
            self.counts[function] = _apart(f"{function}_bytes", taken, made,
                                           self.classes.values(), self.counts.values())
        own = module_level | made | set(self.classes.values()) | set(self.counts.values())
        taken |= own
        self.spelt = {name: spelt(name, own) for name in sorted(names)}
        self.spelt = {name: code for name, code in self.spelt.items() if code != name}
        self.back = {code: name for name, code in self.spelt.items()}
        self._symbols: dict = {}

    @classmethod
    def of(cls, spec: Spec) -> "Spelling":
        """The spec's spelling, made once (memoised on the spec, as ``under`` memoises)."""
        if "_spelling" not in spec.__dict__:
            spec.__dict__["_spelling"] = cls(spec)
        return spec.__dict__["_spelling"]

    def __call__(self, name: str) -> str:
        """A spec name (a tensor's, dim's, input's, state's, block's) as code writes it."""
        return self.spelt.get(name, name)

    def function(self, block: str, step: bool = False, clashes=()) -> str:
        """The function generated for a block (or the model, named as the spec), or its
        decoding step's: ``<block>_step``, or ``<block>_step_`` where that is the name of a
        function among ``clashes`` (a block the same module makes a function of)."""
        name = self.functions.get(block, block)
        if not step:
            return name
        plain = step_function(name)
        return self.steps.get(block, plain) if plain in clashes else plain

    def count(self, function: str) -> str:
        """The function that counts an entry function's memory (its guard's)."""
        return self.counts.get(function) or f"{function}_bytes"

    def params_class(self, function: str) -> str:
        """The parameters' class of a generated function."""
        return self.classes.get(function) or params_class_name(function)

    def spec_name(self, code: str) -> str:
        """The spec's name a code name spells (itself where the spec has it as written)."""
        return self.back.get(code, code)

    def dims(self, expr):
        """A dim expression (sympy, or ``Activations`` of them) over the dims as code spells
        them."""
        if not self.spelt:
            return expr
        parts = [expr] if isinstance(expr, sympy.Basic) else \
            [sympy.sympify(getattr(expr, kind)) for kind in ("float", "int", "bool")]
        mapping = {symbol: self.symbol(symbol) for part in parts
                   for symbol in part.free_symbols if symbol.name in self.spelt}
        if not mapping:
            return expr
        return expr.xreplace(mapping) if isinstance(expr, sympy.Basic) else expr.subs(mapping)

    def symbol(self, symbol: sympy.Symbol) -> sympy.Symbol:
        if symbol not in self._symbols:
            self._symbols[symbol] = sympy.Symbol(self(symbol.name), **symbol.assumptions0)
        return self._symbols[symbol]

    def respelt(self, among=None) -> dict[str, str]:
        """The names spelt otherwise than the spec writes them (those ``among`` given names):
        code name -> spec name."""
        return {code: name for code, name in self.back.items()
                if among is None or name in among}


def _apart(name: str, *taken) -> str:
    """``name``, with underscores after it until none of the collections ``taken`` holds it."""
    while any(name in names for names in taken):
        name += "_"
    return name


def params_class_name(function: str) -> str:
    """``multi_head_attention``: ``MultiHeadAttentionParams``."""
    return "".join(part.capitalize() for part in function.split("_")) + "Params"


def _function_names(spec: Spec) -> set[str]:
    """The names the module's functions may take: the spec's (the model's), its blocks', and
    those its renames give blocks."""
    names = {spec.name, *spec.blocks}
    for block in [None, *spec.blocks.values()]:
        for record in every_record(block.body if block else spec.body):
            if isinstance(record, Rename):
                names |= {record.block, record.new}
    return names


def spec_names(spec: Spec) -> set[str]:
    """Every name of the spec that generated code writes as Python in its functions: its
    dims' (local ones too), tensors' and states', in every branch and under every rename."""
    names = set(spec.dims)
    bodies = [spec.body]
    for block in spec.blocks.values():
        names |= {block.output, *block.local_dims, *(decl.name for decl in block.inputs)}
        bodies.append(block.body)
    for body in bodies:
        for record in every_record(body):
            if isinstance(record, TensorDecl):
                names.add(record.name)
            elif isinstance(record, Equation):
                names |= {record.output, *tensor_names(record.expr)}
            elif isinstance(record, BlockCall):
                names |= {record.output, *record.args}
            elif isinstance(record, Update):
                names |= {record.state, record.value}
            elif isinstance(record, Let):
                names.add(record.dim)
            elif isinstance(record, Rename):
                names |= {name for pair in record.tensors for name in pair}
    return names
