"""A zoo of planted bugs: route doubles, each eager PyTorch with one deliberate fault of a
distinct class, run in real route workers. benchmarks/bench_bug_zoo.py measures on them how
well the fuzzer finds, reduces and buckets bugs (one bug, one bucket)."""
