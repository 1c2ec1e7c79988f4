"""Front ends: a fuzz campaign from the command line, in pytest, or on a Ray cluster.

    fuzz               `torchsim-diff fuzz`: draw cases, run every route, record everything
    pytest_plugin      fuzz suites as pytest items: options, profiles, the hooks that register the session
    pytest_worker      the plugin's worker side: a process running fuzz items (one warm checker each)
    pytest_controller  the plugin's controller side: header, live progress, the merged report
    ray_cluster        campaigns across machines: shards on actors, one driver
    budget             time budgets: when to stop drawing, how long shrinking may go on
    progress           live progress per route
    options            option values checked where they are parsed
    interrupts         SIGTERM and SIGHUP end a run as Ctrl-C does
    closed_output      output whose reader left (`| head -1`) changes neither the work nor the status
    run_folder         what a run writes in its --out folder, checked before any work
    time_kernels       `python -m torchsim_diff.campaign.time_kernels`: a case's kernels timed on TOGSim
"""
