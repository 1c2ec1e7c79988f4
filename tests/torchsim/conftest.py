"""The workdir tests replay kernels in Triton's interpreter in this process: TRITON_INTERPRET=1
must be set before triton is imported."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
