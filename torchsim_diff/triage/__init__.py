"""After a failure: reduce it, refine its cause, and self-check it before it is called NEW.

    reduce          a failing case reduced to a small one in the same bucket
    refine          reduce, then bucket: the cause signature read from the minimal case
    self_check      NEW only when a bucket's replays fail and its repro.py reproduces it
    corpus_replay   replaying corpus entries: seeds must pass, known bugs must still fail

It sits above report: the self-check writes a bucket's bundle and runs its repro.py.
"""
