"""Naming a failure: its signature and bucket, buckets kept across runs, and the known-bug ledger.

    signatures      failure signatures and buckets: one bug, one bucket
    bucket_history  buckets kept across runs (new vs seen before)
    history_file    opening the history's SQLite file: verified before it is trusted
    wal_frames      frames of a SQLite write-ahead log that SQLite would silently drop
    corpus          seed cases that must pass, known bugs that must keep failing
    causes          the known-bug ledger by root cause: project, status, upstream, cases
    projects        the upstream projects a cause is filed with, and their issue templates
    known_ledger    where the ledger is: corpora/known here, else the package's copy
    known_defects   known TOGSim defects in the ledger
    which_cause     which known cause a failure is, or new

Nothing here runs a case: the reducer that gives a failure its minimal case is triage's.
"""
