"""Drawing cases: Hypothesis strategies over the op registry (torchsim_diff.ops).

    strategies     small op graphs over strided, broadcast and in/out inputs, valid by construction
    edge_placement the edges a node means to meet, placed at the op's own operands
    input_layouts  strides, offset and storage of a new input for its layout class
    domains        the value domains and dtypes drawn
    edge_reach     which (op, edge) cells a case meets at the op's own operands, measured in eager
    schedules      coverage-guided choices: each node's op, each argument's value, each edge cell
    switches       per-case switches: value tail, size tail, special values
    policy         every generation knob in one object, printed in the run header, overridable
    draws          a campaign's cases: the first N distinct cases a seed gives, one at a time
"""
