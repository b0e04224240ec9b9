"""Generated NumPy modules made to share out their work on the smallest inputs."""

from concurrent.futures import ThreadPoolExecutor


def on_a_pool(loaded, threads: int):
    """A generated NumPy module, its pool given ``threads`` workers (1: no pool) and its pieces
    and blocks made so small that every shared-out path runs on small inputs."""
    loaded.WORKERS = threads
    loaded.POOL = ThreadPoolExecutor(threads - 1) if threads > 1 else None
    loaded.PARALLEL_MIN_WORK = 1
    loaded.PIECE_SIZE = 16
    loaded.QUERY_BLOCK = 2
    return loaded
