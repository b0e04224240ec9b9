"""Generated NumPy modules made to share out their work on the smallest inputs."""

from concurrent.futures import ThreadPoolExecutor


def on_a_pool(loaded, threads: int):
    """A generated NumPy module with a runtime of its own (load_source(..., private=True)),
    the runtime's pool given ``threads`` workers (1: no pool) and its pieces and blocks made
    so small that every shared-out path runs on small inputs."""
    runtime = loaded.rt
    runtime.WORKERS = threads
    runtime.POOL = ThreadPoolExecutor(threads - 1) if threads > 1 else None
    runtime.PARALLEL_MIN_WORK = 1
    runtime.PIECE_SIZE = 16
    runtime.QUERY_BLOCK = 2
    return loaded
