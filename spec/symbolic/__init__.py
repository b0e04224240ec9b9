"""The algebra beneath everything: dims as sympy symbols, expressions over them (``expr``) and
shapes, tuples of such expressions (``shape``). It imports nothing of tspec but its errors and
numbers, so that the op catalogue, the language and everything after them can stand on it."""
