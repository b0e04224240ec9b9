"""What a checked spec gives: attention cores, counts (parameters, FLOPs, memory), dim
expressions evaluated at many sizes at once, grids and diffs."""
