"""Passes: rewrites of the IR (``codegen.ir``) between lowering and rendering, each a function
from a module to a module that changes how a computation is done, never what it computes.

- ``attention.choose_strategy``: an attention core whose scores are q @ k.T + L is computed,
  where no trace is asked for, by the backend's strategy (``Backend.attention``: a block of
  query rows at a time, or the scores and weights in one kernel);
- ``attention.keep_masked``: after the scores, float16's +inf at masked keys set back to -inf;
- ``fusion.fuse_projections``: a bias added to, and an activation applied to, a product's
  fresh result in place (``rt.project(X, W, b, activation=rt.gelu)``), and a gated unit's
  activation and product in one pass (``rt.glu(gate, x, activation=rt.silu)``);
- ``residual.fuse_residuals``: where the backend fuses them (``Backend.fused_residual``), a
  residual sum added in the kernel of the LayerNorm or RMSNorm that reads it
  (``rt.layer_norm(X, gamma, beta, eps, residual=Y)``), a named sum the residual stream uses
  again written by that kernel too, where no trace is asked for;
- ``memory.guard_memory``: an entry function whose footprint lowering knows checks it against
  the module's MEMORY_LIMIT before it starts.

``PASSES`` is every pass, in the order ``codegen.lowering.lower`` applies them.
"""

from tspec.codegen.passes.attention import choose_strategy, keep_masked
from tspec.codegen.passes.fusion import fuse_projections
from tspec.codegen.passes.memory import guard_memory
from tspec.codegen.passes.residual import fuse_residuals

PASSES = (choose_strategy, keep_masked, fuse_projections, fuse_residuals, guard_memory)
