"""Rendering: the IR through jinja2 templates to Python source text.

The Environment is built once (StrictUndefined, trim_blocks, lstrip_blocks,
keep_trailing_newline). Everything a template places is prepared here as strings and lists of
lines: expressions by the printer (``printer``), lines broken by ``layout``, each step through
its macro in ``steps.py.j2`` (``steps``); the templates only loop and place them. The same
templates serve every backend: the array module's name comes from the backend table. A model
module calls its helpers in the runtime module of its backend (``render_runtime``), which it
imports as ``rt``; its imports are those the IR's records call for, never found in its text.
"""

import ast
import functools
import hashlib
import re
from pathlib import Path

import jinja2

from tspec.codegen import ir
from tspec.codegen.backends import BACKENDS, IMPORTS, Backend, Helper, runtime_order
from tspec.codegen.lowering.decoding import PREFILL
from tspec.codegen.rendering import layout
from tspec.codegen.rendering.layout import LINE_LENGTH
from tspec.codegen.rendering.printer import Printer
from tspec.codegen.rendering.steps import StepRenderer
from tspec.errors import CodegenError, hidden
from tspec.files import HEADERS
from tspec.symbolic.expr import dim_text

# the folders templates are looked up in, in this order (environment() reads it once)
TEMPLATE_DIRS: list[Path] = [Path(__file__).resolve().parents[1] / "templates"]
# what the runtime's own code (runtime.py.j2, before its helpers) imports, beside its array
# module and jaxtyping
RUNTIME_IMPORTS = ("os", "warnings")
# what the module's docstring says of every model module (``_about``)
ABOUT = ("Each function computes {what}; the docstring of {whose} gives its equations (their "
         "LaTeX is in the docs pages), and each statement that computes a tensor is commented with its shape. A family of "
         "tensors ([H] B T d_k) is one array, (H, B, T, d_k). Parameters come in nested "
         "dictionaries keyed by the spec's names (the *Params classes){cache}. The helpers, "
         "rt.<name>, are in _runtime.py beside this module. Pass trace={{}} to receive every "
         "named intermediate.")
CACHE = ("; a decoding step's cache is nested alike, each state read, then replaced in place by "
         "its value for the next step")
CHECKS = ("On every call, whatever TSPEC_TYPECHECK says, {entries} {verb} {their} arguments "
          "(rt.entry, by RULES): shapes and dtype kinds as annotated, one size a dim, one float "
          "dtype for the parameters, stacks of a layer or more, dims integers >= 1, settings "
          "finite and > 0, the spec's derived dims and constraints{decoding}.{also} A "
          "ValueError names the first argument that does not fit; TSPEC_TYPECHECK=1 before "
          "import checks every array every function takes and returns, too.")
DECODING_CHECKS = "; {step} its cache (rt.check_cache); prefill's go to {entry}"
# what else the module checks on every call, by the helpers its code calls
ALSO = {"require_memory": "past MEMORY_LIMIT, {they} {verb} to start (rt.require_memory)",
        "embed": "token ids must index their table (rt.embed)",
        "require_size": "a block checks that sizes it reads twice agree (rt.require_size)"}
# the constants a user sets, placed before the model (the rest, with the parameter classes,
# after it: the module starts with the model)
LEAD = ("MEMORY_LIMIT",)
HEADER = HEADERS[".py"].rstrip("\n")         # the first line: what tspec may replace
VERSION_LINE = 'VERSION = "{}"  # of this runtime: the sha256 of its text without this line'
# every runtime rendered in this process: its text by its backend, helpers and templates; its
# backend's name and text by VERSION
_RUNTIMES: dict[tuple, str] = {}
_BY_VERSION: dict[str, tuple[str, str]] = {}


@functools.cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIRS),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True,
        # HTML pages escape what they place; Python and Markdown take text as it is
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",),
                                            default_for_string=False, default=False))


def render(module: ir.Module) -> str:
    """The module's source: rendered once to learn which names it uses, then with imports.

    Spec text (titles, meanings, sources, equations, file paths) reaches the code only inside
    docstrings and comments, through ``_docstring_text``; the result must parse."""
    title = _docstring_text(module.title, "the spec's title")
    spec_file = _docstring_text(module.spec_file, "the spec's path")
    printer = Printer(module.backend.alias)
    steps = StepRenderer(printer, environment().get_template("steps.py.j2").module)
    functions = [_function_view(f, printer, steps, module.backend) for f in module.functions]
    context = {
        "module": module, "title": title, "spec_file": spec_file, "header": HEADER,
        "module_open": _docstring_open([title, spec_file]),
        "backend": module.backend, "xp": module.backend.alias,
        "array": module.backend.array_type,
        "choice_lines": _wrap(", ".join(f"{k}={v}" for k, v in module.choices), 96),
        "about_lines": _about(module),
        "lead_lines": _lead(module, spec_file),
        "keyword_lines": _keyword_lines(module.functions),
        "functions": functions,
        "params_classes": _params_views(module.params_classes, printer, module.backend),
        "settings_class": _settings_view(module.functions, printer),
        "counts": [_count_view(step, steps) for f in module.functions for step in f.prologue
                   if isinstance(step, ir.MemoryGuard)],
        "runtime_version": runtime_version(render_runtime(module.backend)),
        "lead_constants": [_constant_view(c) for c in module.constants if c.name in LEAD],
        "constants": [_constant_view(c) for c in module.constants if c.name not in LEAD],
    }
    template = environment().get_template("module.py.j2")
    text = template.render(**context, imports=_imports(module, printer))
    _require_parsing(text, f"the code generated for {module.spec_name}")
    return text


def render_runtime(backend: Backend) -> str:
    """The runtime module of ``backend`` (generated/<backend>/_runtime.py): every helper its
    models may call, rendered once; a function of the backend alone. Its VERSION is the start
    of the sha256 of its text without that line (``runtime_version``)."""
    helpers = runtime_order(backend)
    key = (repr(backend), helpers, tuple(TEMPLATE_DIRS))
    if key not in _RUNTIMES:
        for helper in helpers:
            _require_template(helper, backend)
        context = {"backend": backend, "xp": backend.alias, "array": backend.array_type,
                   "header": HEADER,
                   "helpers": [ir.Helper(h.name, backend.template(h.name)) for h in helpers],
                   "version_line": VERSION_LINE.format("")}
        imports = _declared_imports(backend, [*RUNTIME_IMPORTS,
                                              *(name for h in helpers for name in h.imports)])
        text = stamped(environment().get_template("runtime.py.j2").render(**context,
                                                                          imports=imports))
        _require_parsing(text, f"the {backend.name} runtime")
        _RUNTIMES[key] = text
        _BY_VERSION[runtime_version(text)] = (backend.name, text)
    return _RUNTIMES[key]


def stamped(text: str) -> str:
    """A runtime's text with its VERSION line stating its version (``runtime_version``)."""
    return re.sub(r'^VERSION = "\w*"', f'VERSION = "{runtime_version(text)}"', text, count=1,
                  flags=re.MULTILINE)


def runtime_version(text: str) -> str:
    """A runtime's VERSION: the first 16 hex digits of the sha256 of its text without the line
    that states it."""
    kept = [line for line in text.splitlines(keepends=True) if not line.startswith("VERSION = ")]
    return hashlib.sha256("".join(kept).encode()).hexdigest()[:16]


def runtime_named(version: str) -> tuple[str, str] | None:
    """The backend's name and the text of the runtime whose VERSION is ``version``: one this
    process rendered, or a backend's as the templates render it now; None when neither is."""
    if version not in _BY_VERSION:
        for backend in BACKENDS.values():
            render_runtime(backend)
    return _BY_VERSION.get(version)


def helper_source(backend: Backend, name: str) -> str:
    """One helper's code as the runtime of ``backend`` holds it."""
    return environment().get_template(backend.template(name)).render(
        backend=backend, xp=backend.alias, array=backend.array_type)


def _require_template(helper: Helper, backend: Backend) -> None:
    """A helper's template, or an error saying where to write it."""
    template = backend.template(helper.name)
    try:
        environment().get_template(template)
    except jinja2.TemplateNotFound:
        owner = f" (op {helper.op}'s)" if helper.op else ""
        raise CodegenError(f"helper {helper.name}{owner} has no template for {backend.name}: "
                           f"write codegen/templates/{template}") from None


def _declared_imports(backend: Backend, names: list[str]) -> list[str]:
    """The runtime's import lines, from what its code and its helpers declare they import
    (``Helper.imports``): the standard library's, then the array module's, jaxtyping and
    erf, then resource, which only Unix has."""
    unknown = sorted(set(names) - set(IMPORTS))
    if unknown:
        raise CodegenError(f"a helper declares the import {unknown[0]}, which is none of "
                           f"codegen.backends.IMPORTS ({', '.join(IMPORTS)})")
    wanted = set(names)
    # isort's order: each `import x` before every `from x import y`, each group by module
    standard = sorted((IMPORTS[name] for name in wanted - {"erf", "resource"}),
                      key=lambda line: (line.startswith("from "), line))
    third = [f"import {backend.module} as {backend.alias}",
             "from jaxtyping import Bool, Float, Int, jaxtyped"]
    if "erf" in wanted:
        third.append(backend.erf_import)
    if "resource" in wanted:
        third += ["", "try:", "    import resource  # Unix only: memory_total() does without it",
                  "except ImportError:", "    resource = None"]
    return standard + [""] + third


def _require_parsing(text: str, what: str) -> None:
    try:
        ast.parse(text)
    except SyntaxError as error:    # a defect of tspec's, never of the spec: say so plainly
        raise CodegenError(f"internal error: {what} does not parse ({error.msg}, line "
                           f"{error.lineno}); please report it") from None


def _docstring_text(text: str, what: str) -> str:
    """Spec text as a docstring or comment of generated code carries it: refused when it could
    end its line or its docstring (the spec's parser refuses such text first; this is the
    last gate before code)."""
    bad = next((c for c in text if hidden(c)), None)
    if bad is not None:
        raise CodegenError(f"{what} {text!r} holds the character U+{ord(bad):04X}, which "
                           "generated code cannot carry in a docstring or comment")
    if '"""' in text:
        raise CodegenError(f'{what} {text!r} holds """, which would end a docstring in '
                           "generated code")
    return text


def _lead(module: ir.Module, spec_file: str) -> list[str]:
    """Where the module comes from and what to change instead of it: the spec, and for a
    variant's module the variant too, whose dims and settings its keywords default to."""
    # the spec's path and hash on one line: a space no line breaks at, put back after
    made = f"generated by `tspec generate` from {spec_file}\0(sha256 {module.spec_hash[:16]})"
    if module.origin:
        origin = _docstring_text(module.origin, "the variant's name")
        text = (f"The forward pass of the variant {origin} for {module.backend.description}, "
                f"{made} and the variant, its dims and settings the defaults of the keyword "
                "arguments that take them. Do not edit: change the variant or the spec and "
                "regenerate. Choices:")
    else:
        text = (f"The forward pass for {module.backend.description}, {made}. Do not edit: "
                "change the spec and regenerate. Choices:")
    return [line.replace("\0", " ") for line in _wrap(text, 96)]


def _about(module: ir.Module) -> list[str]:
    """What the module's docstring says of its functions, true of this module's: which
    compute what, and which check their arguments on every call."""
    checked = [f.name for f in module.functions if f.checked]
    steps = [name for name in checked if name != module.entry]
    decodes = any(f.name == PREFILL for f in module.functions)
    what = [f"the model ({module.entry})"] + (
        [f"a decoding step ({', '.join(steps)})", f"the cache it starts from ({PREFILL})"]
        if decodes else []) + ["one block of the spec"]
    about = ABOUT.format(
        what=_listed(what, "or"), whose=f"each but {PREFILL}" if decodes else "each",
        cache=CACHE if any(function.cache for function in module.functions) else "")
    if not checked:
        return _wrap(about, 96)
    one = len(checked) == 1
    words = {"entries": _listed(checked), "their": "its" if one else "their"}
    called = {r.name for r in ir.walk(module.functions) if isinstance(r, ir.Runtime)} | \
        ({"require_memory"} if any(isinstance(r, ir.MemoryGuard)
                                   for r in ir.walk(module.functions)) else set())
    also = [text.format(**words, they="it" if one else "they", verb="refuses" if one else
                        "refuse")
            for name, text in ALSO.items() if name in called]
    checks = CHECKS.format(
        **words, verb="checks" if one else "check",
        decoding=DECODING_CHECKS.format(entry=module.entry, step=", ".join(steps))
        if decodes and steps else "",
        also=f" {'; '.join(also)[:1].upper()}{'; '.join(also)[1:]}." if also else "")
    return _wrap(about, 96) + [""] + _wrap(checks, 96)


def _listed(names: list[str], word: str = "and") -> str:
    """a; a and b; a, b and c (``word``: and, or)."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {word} {names[-1]}"


def _docstring_open(lines: list[str]) -> str:
    """A raw docstring where the text holds a backslash (LaTeX), so that none is an escape."""
    return 'r"""' if any("\\" in line for line in lines) else '"""'


def _imports(module: ir.Module, printer: Printer) -> list[str]:
    """A model module's imports, from what its records call for: the standard modules its
    dims' code calls (math), typing's names for a tuple of results and the parameter classes,
    jaxtyping's for the kinds of its arrays, and its array module."""
    # the annotations name the parameter classes, which follow the model: read when needed
    standard = ["from __future__ import annotations", ""]
    standard += [f"import {name}" for name in sorted(printer.modules)]
    types = [record for record in ir.walk(module.functions + module.params_classes)
             if isinstance(record, ir.ArrayType)]
    typing_names = [name for name, used in (
        ("NamedTuple", bool(_setting_keywords(module.functions))),
        ("Tuple", any(len(f.returns) > 1 for f in module.functions)),
        ("TypedDict", any(view["alias"] is None for view in _params_views(
            module.params_classes, printer, module.backend)))) if used]
    if typing_names:
        note = "  # noqa: UP035" if "Tuple" in typing_names else ""
        standard.append(f"from typing import {', '.join(typing_names)}{note}")
    kinds = [k for k in ("Bool", "Float", "Int") if any(t.kind == k for t in types)]
    backend = module.backend
    third = [f"import {backend.module} as {backend.alias}"]
    third += [f"from jaxtyping import {', '.join(kinds)}"] if kinds else []
    return standard + [""] + third


def _constant_view(constant: ir.Constant) -> dict:
    value = constant.value
    if isinstance(value, ir.EntryRules):        # in the spec's notation, / dividing exactly
        value = {"lets": {name: dim_text(expr) for name, expr in value.lets},
                 "requires": {dim_text(relation): at for relation, at in value.requires}} | (
            {"spelled": dict(value.spelled)} if value.spelled else {})
    lines = layout.literal(value)
    return {"name": constant.name, "comment": _wrap(constant.comment, LINE_LENGTH, "# ", "# "),
            "first": lines[0], "rest": lines[1:]}


def _params_views(classes: list[ir.ParamsClass], printer: Printer,
                  backend: Backend) -> list[dict]:
    """Each parameter class as the module defines it: one whose fields are an earlier one's
    is that one, by name. Fields are compared with the classes they hold taken as the ones
    they alias, so that a decoding step's classes (a layer holding a cached attention whose
    class is the full attention's) are the full model's, all the way up."""
    first: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    names = {params.name for params in classes}
    views = []
    for params in classes:
        same = first.setdefault(_fields_key(params.fields, aliases, names), params.name)
        if same != params.name:
            aliases[params.name] = same
            views.append({"name": params.name, "alias": same})
        else:
            views.append(_params_view(params, printer, backend))
    return views


def _fields_key(fields: tuple[ir.Field, ...], aliases: dict[str, str],
                classes: set[str]) -> tuple:
    """What makes two parameter classes the same: each field's name and type, a class it
    holds (one of ``classes``, or a list of one) as the class that one aliases, and the
    meaning of an array (a field holding a class means the block it is for, which a step's
    block names otherwise)."""
    key = []
    for field in fields:
        annotation = field.annotation
        holds_class = isinstance(annotation, ir.PlainType) and \
            bool({annotation.name, annotation.of} & classes)
        if holds_class:
            annotation = ir.PlainType(aliases.get(annotation.name, annotation.name),
                                      aliases.get(annotation.of, annotation.of))
        key.append((field.name, annotation, None if holds_class else field.meaning))
    return tuple(key)


def _params_view(params: ir.ParamsClass, printer: Printer, backend: Backend) -> dict:
    lines = []
    for field in params.fields:
        meaning = _docstring_text(field.meaning, f"the meaning of {field.name}")
        annotation = printer.type(field.annotation, backend.array_type)
        lines += layout.explained(f"{field.name}: {annotation}", meaning, LINE_LENGTH - 4)
    return {"name": params.name, "alias": None, "doc": params.doc, "lines": lines}


def _count_view(guard: ir.MemoryGuard, steps: StepRenderer) -> dict:
    """A memory guard's count function, placed after the model: its signature (the entry
    function's arguments, its keyword dims), docstring and body."""
    footprint = guard.footprint
    parts = [*footprint.arguments, *(["*", *footprint.keywords] if footprint.keywords else [])]
    head = list(layout.call(f"def {footprint.function}", parts, "", LINE_LENGTH - 8))
    head[-1] += " -> int:"
    doc = _wrap(f'"""The most bytes {guard.function}\'s tensors take at once, its calls\' '
                "included (the spec's activation counts): what its memory guard checks "
                'against MEMORY_LIMIT."""', LINE_LENGTH - 4)
    return {"head": head, "doc": doc, "body": steps.count_lines(footprint, LINE_LENGTH - 4)}


def _setting_keywords(functions: list[ir.Function]) -> list[ir.Parameter]:
    """The run-time settings the entry functions take as keyword arguments (floats), each
    once: every setting a block reads is one of them."""
    found = {k.name: k for f in functions if not f.settings for k in f.keywords
             if k.annotation == ir.PlainType("float")}
    return list(found.values())


def _settings_view(functions: list[ir.Function], printer: Printer) -> dict | None:
    """The module's Settings class: one field for each run-time setting its entry functions
    take as a keyword argument (a float), with that keyword's default; None where no block
    reads one."""
    fields = _setting_keywords(functions)
    if not fields:
        return None
    lines = [f"{k.name}: float = {printer(k.default)}" for k in fields]
    doc = "The run-time settings the blocks read: an entry function's keywords, one record."
    return {"doc": _wrap(f'"""{doc}"""', LINE_LENGTH - 4), "lines": lines}


def _keyword_lines(functions: list[ir.Function]) -> list[str]:
    """What each keyword argument of the module's functions means, each named once."""
    meanings = {keyword.name: keyword.meaning for function in functions
                for keyword in function.keywords}
    return [line for name, meaning in meanings.items()
            for line in _wrap(_docstring_text(f"{name}: {meaning}", f"the meaning of {name}"),
                              96, "    ", "        ")]


def _function_view(function: ir.Function, printer: Printer, steps: StepRenderer,
                   backend: Backend) -> dict:
    def annotation(type_: ir.Type) -> str:
        return printer.type(type_, backend.array_type)

    signature = [f"{a.name}: {annotation(a.annotation)}," for a in function.arguments]
    if function.params_class:
        signature.append(f"params: {function.params_class},")
    if function.cache:
        signature.append("cache: dict,")
    if function.settings:
        signature.append("settings: Settings = SETTINGS,")
    keywords = [f"{k.name}: {annotation(k.annotation)}"
                f"{'' if k.default is None else ' = ' + printer(k.default)},"
                for k in function.keywords]
    if function.traces:
        keywords.append("trace: dict | None = None,")
    if keywords:                         # the keyword-only arguments on as few lines as fit
        signature += layout.packed(["*,", *keywords], LINE_LENGTH - 4)

    summary = _docstring_text(function.summary, f"the summary of {function.name}")
    source = f"From {function.source} ({function.where})." if function.source else \
        f"From {function.where}."
    lead = _wrap(f"{summary.rstrip('.')}. {source}" if summary else source, LINE_LENGTH - 4,
                 "    ")
    doc = [line.removeprefix("    ") for line in lead[1:]]
    if function.equations:
        doc.append("")
        for equation in function.equations:
            doc.append("    " + equation.plain)
    for note in function.notes:
        doc += [""] + _wrap(note, 96)
    doc = [_docstring_text(line, f"the docstring of {function.name}") for line in doc]

    body = steps.lines(function.prologue) + steps.lines(function.steps)
    results = [annotation(r) for r in function.returns]
    if len(results) > 1:
        returns = f"Tuple[{', '.join(results)}]:  # noqa: UP006"
    else:
        returns = (results[0] if results else "None") + ":"
    return {"name": function.name, "checked": function.checked, "signature": signature,
            "returns": returns,
            "docstring_open": _docstring_open([lead[0], *doc]),
            "summary": lead[0].removeprefix("    "), "doc_lines": doc, "body": body}


_wrap = layout.prose
