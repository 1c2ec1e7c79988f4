"""After a failure: reduce it, refine its cause, and self-check it before it is called NEW.

    reduce               a failing case reduced to a small one in the same bucket: the reducer, the pass order
    case_edits           what every reducer pass edits a case with: candidates, validity, an input's values
    graph_passes         the reducer's passes over the graph and shapes: outputs, nodes, windows, ops, dims, layouts
    value_passes         the reducer's passes over input values, and float16/bfloat16 raised to float32
    refine               reduce, then bucket: the cause signature read from the minimal case
    trigger_ablations    a minimal case's trigger by ablation; the special elements it needs; neutral ops
    session_refinements  reduce, then bucket at a pytest session's end: each process's refined-*.jsonl
    shared_reductions    a run's reductions shared by its processes: a failure is reduced once per run
    self_check           NEW only when a bucket's replays fail and its repro.py reproduces it
    corpus_replay        replaying corpus entries: seeds must pass, known bugs must still fail

It sits above report: the self-check writes a bucket's bundle and runs its repro.py.
"""
