"""What a run leaves: the failure kinds and statuses, and results.jsonl.

    kinds          Kind and Status, the words every module agrees on (standard library only)
    record         Record: one results.jsonl record, its fields, schema version and checks
    run_metrics    RunMetrics: what one run measured and noticed (route, worker and checker figures)
    jsonl          results.jsonl: append records as they are made, read them back
"""
