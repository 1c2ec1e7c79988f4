"""Drawing cases: Hypothesis strategies over the op registry (torchsim_diff.ops).

    strategies     small op graphs over strided, broadcast and in/out inputs, valid by construction
    edge_reach     which (op, edge) cells a case meets at the op's own operands, measured in eager
"""
