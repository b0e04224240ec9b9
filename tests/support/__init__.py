"""What the test modules share: arrays and backends, comparisons, the command line in a test,
exact refusals, the NumPy references, hypothesis strategies, the CuPy kernels' checks, pools,
small specs and the CPU stand-in for CuPy. A test module imports from here
(``from support.refusals import raises``), never from another test module."""
