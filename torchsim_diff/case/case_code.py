"""The module a case's program and its node expressions run as (program_check.CASE_MODULE).

Their globals name this module, so that torch's warnings about what a case computes can be told
from others. torch.compile may import the module its function's globals name and read the
function's globals through it (torch 2.11's Dynamo does): so the module exists, and it holds the one
module a program imports.
"""
import torch  # noqa: F401 - read through this module by torch.compile
