"""Text that goes into the scripts a bundle ships (repro.py): record fields from files as
string literals that cannot end early, and a check that a script says only what was meant.

Titles, notes and compiler messages come from results files and corpus entries, which people
share; written into a docstring as they are, a `\"\"\"` in one would end the string and the rest
would run as code when a maintainer runs repro.py. `docstring` escapes every quote and
backslash; `check_script` parses the finished script and confirms its docstring is the text.
"""
from __future__ import annotations

import ast


class ScriptTextError(ValueError):
    """A generated script that does not parse, or whose docstring is not the text given."""


def docstring(text: str) -> str:
    """`text` as a triple-quoted literal: backslashes, quotes and control characters escaped."""
    cleaned = "".join(ch if ch == "\n" or ch.isprintable() else " " for ch in str(text))
    return '"""' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"""'


def check_script(script: str, head: str) -> str:
    """`script`, after checking that it parses and that its docstring is exactly `head`
    (cleaned as `docstring` cleans it): nothing from a record escaped into the code."""
    try:
        tree = ast.parse(script)
    except (SyntaxError, ValueError) as exc:
        raise ScriptTextError(f"the generated script does not parse: {exc}") from None
    expected = ast.literal_eval(docstring(head))
    if ast.get_docstring(tree, clean=False) != expected:
        raise ScriptTextError("the generated script's docstring is not the text it was given")
    return script
