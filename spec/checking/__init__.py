"""Checking a spec: the prover, the checker and its findings, the limits every command keeps,
and the seeds audit."""
