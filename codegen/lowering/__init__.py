"""Lowering: a proved spec under one choice of options to the IR (``codegen.ir``), the
semantics alone: what each function computes, from which arrays its dims are read, what it
returns. No rewrite for speed and no Python text here: the passes (``codegen.passes``) and the
renderer (``codegen.rendering``) come after."""
