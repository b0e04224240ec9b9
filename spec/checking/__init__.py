"""Checking a spec: the prover, the checker and its findings, and the limits every command
keeps. The checker's modules, in the order they stand on each other:

    prove        the prover: claims over dims, for every size the constraints allow
    findings     a finding and how it is shown; limits: the bounds every command keeps
    coverage     the space of choice combinations, and the combinations a finding covers
    scope        the names in force where a record is checked, and its claims' findings
    order        data-flow order (a cycle is an error)
    ways         the choices a block reads, and what it keeps merged across its ways
    constraints, claims, calls
                 one run's constraints, claims (equations, sizes, updates) and block calls
    run          one run: one spec under one combination of choices
    blame, decoding
                 after the runs: which of a tensor's uses or its declaration is wrong; the
                 decoding step against the full model
    check        the entry: ``check(spec, choices, values)``, its runs and its result
    report, values
                 what the commands print of a result
"""
