"""The case model: an op graph over inputs with exact layouts and values, as versioned JSON.

    graph          Case: inputs, nodes, outputs, dtype; to/from JSON; the program text
    layout         materialise inputs with exact sizes, strides and offsets in guarded storage
    values         deterministic input values per value domain
    validate       one validator for case JSON from outside, with size limits
    program_check  the one gate where program text becomes code
    case_code      the module that code runs as
    transforms     every intermediate as an output; the node that diverges first

A case is data: nothing here runs text that came from a file without program_check.
"""
