"""After a failure: reduce it, sign it, bucket it, and tell known bugs from new ones.

    reduce          a failing case reduced to a small one in the same bucket
    signatures      failure signatures and buckets: one bug, one bucket
    bucket_history  buckets kept across runs (new vs seen before)
    history_file    opening the history's SQLite file: verified before it is trusted
    wal_frames      frames of a SQLite write-ahead log that SQLite would silently drop
    self_check      NEW only when a bucket's replays fail and its repro.py reproduces it
    corpus          seed cases that must pass, known bugs that must keep failing
    corpus_replay   replaying corpus entries
    kernels/        Triton kernel launches: capture, replay one launch, localise the first divergent one
"""
