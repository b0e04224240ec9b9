"""The attention passes: how an attention core (``ir.AttentionCore``) is computed.

``choose_strategy``: where a core's scores are q @ k.T + L, or f(q @ k.T) + L for a chain f
of element-wise ops (its ``form``), the backend's strategy (``Backend.attention``) computes
the equations at once when no trace is asked for: ``rt.attend_in_blocks`` a block of query
rows at a time over the keys each block sees, f applied to each block (NumPy),
``rt.attend_fused`` the scores and weights in one kernel (CuPy), which applies no chain: a
core with one is computed as written there, and says so (``unblocked``). With a trace the
equations run as written.

``keep_masked``: in float16 a score past its range is +inf, and +inf + (-inf) at a masked key
NaN, which would make the row NaN; after the scores such entries are set back to -inf.
"""

import dataclasses

from tspec.codegen import ir
from tspec.codegen.passes.rewrite import map_steps


def choose_strategy(module: ir.Module) -> ir.Module:
    backend = module.backend

    def rule(step: ir.Step) -> ir.Step:
        if not isinstance(step, ir.AttentionCore) or step.form is None or \
                step.strategy is not None:
            return step
        form = step.form
        if form.scores is not None and not backend.score_chains:
            return dataclasses.replace(step, unblocked=(
                f"the scores pass through {', '.join(form.chain)}, which "
                f"{backend.attention} cannot apply: computed as written, "
                f"{form.scores_shape.text()} at once"))
        keywords = () if form.side_by_side else (ir.Keyword("side_by_side", ir.Literal(False)),)
        if form.scores is not None:
            keywords += (ir.Keyword("scores", form.scores),)
        call = ir.Call(ir.Runtime(backend.attention),
                       (form.q, form.k, form.values, form.mask), keywords)
        return dataclasses.replace(step, strategy=ir.AttentionStrategy(
            backend.attention_note, call, form.shape))

    return map_steps(module, rule)


def keep_masked(module: ir.Module) -> ir.Module:
    def rule(step: ir.Step) -> ir.Step:
        if not isinstance(step, ir.AttentionCore) or \
                any(isinstance(s, ir.KeepMasked) for s in step.steps):
            return step
        steps = []
        for inner in step.steps:
            steps.append(inner)
            if isinstance(inner, ir.Assign) and ir.Name(step.scores) in inner.targets:
                steps.append(ir.KeepMasked(ir.Name(step.scores), step.mask))
        return dataclasses.replace(step, steps=tuple(steps))

    return map_steps(module, rule)
