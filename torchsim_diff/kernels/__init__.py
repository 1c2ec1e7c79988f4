"""Triton kernel launches as data: every launch of a case recorded with its buffers before and
after, in a format the routes write and the replay, the reports and the timing read.

    capture        the capture format, and recording Inductor's launches into it

Replaying a launch needs a Triton executor, the triton route's knowledge: routes.triton's
launch_replay and localise.
"""
