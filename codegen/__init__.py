"""Code generation from a checked spec (spec -> IR -> templates -> generated/)."""

if __name__ != "tspec.codegen":  # the checkout's codegen/ folder imported as a top-level package
    raise ImportError("codegen/ is the source folder of tspec.codegen: import tspec.codegen")
