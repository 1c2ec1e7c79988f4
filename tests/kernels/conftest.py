"""Kernel tests import the `doubles` package from tests/ (launchers, case helpers) and run
Triton's interpreter in this process. TRITON_INTERPRET=1 is set at collection, before anything
imports Inductor's triton_helpers: that module picks its libdevice at import time, and a case
validated on meta tensors may import it first."""
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
