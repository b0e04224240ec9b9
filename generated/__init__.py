"""Forward code generated from the spec by `tspec generate`."""

if __name__ != "tspec.generated":  # the checkout's generated/ folder imported as a top level
    raise ImportError("generated/ is the source folder of tspec.generated: "
                      "import tspec.generated")
