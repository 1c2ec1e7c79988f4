"""What a run hands people: tables, the HTML page, and reproducer bundles.

    tables          summary, tolerance, bucket and coverage tables over records
    tolerance       tolerance per route x op x dtype and per route; PyTorch's toleranceOverride form
    bundles         reproducer bundles (repro.py, case, inputs, notes) per bucket
    issue_title     what a report calls a bug: its upstream, its title, the program as an expression
    repro_script    repro.py's text
    repro_runs      repro.py run as a maintainer runs it
    issue_text      ISSUE.md in the upstream's template
    adapter_bundle  repro.py for a Triton-to-linalg adapter bug (the kernel's TTIR)
    mlir_host       the host runner a torch-mlir bundle ships
    cause_analysis  the paragraph ISSUE.md gives a known cause
    script_text     record text made safe for the scripts a bundle ships
"""
