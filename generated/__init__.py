"""Forward code generated from the spec by `tspec generate`."""
