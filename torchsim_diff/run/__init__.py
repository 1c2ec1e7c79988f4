"""Running one case: case -> route worker -> verdict -> record, the same for every front end.

    checker            Checker (warm route workers, reference, judge) and Verdict
    op_figures         error figures per op: the case rerun with every intermediate an output
    batch              several cases compiled as one program, judged per case
    second_size        a dynamic-shape case run again at other sizes
    adaptive_timeouts  per-route time limits that fit what the route has shown
    one_ahead          one case in flight on a thread while the next is drawn
    background_delete  what passing cases leave behind, deleted off the critical path
"""
