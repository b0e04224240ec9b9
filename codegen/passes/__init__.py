"""Passes: rewrites of the IR (``codegen.ir``) between lowering and rendering, each a function
from a module to a module that changes how a computation is done, never what it computes."""
