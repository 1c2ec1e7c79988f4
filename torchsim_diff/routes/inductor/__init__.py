"""Route `inductor`: torch.compile with Inductor's C++ backend on CPU.

    inductor       the Route
    machine        what Inductor's C++ backend works out once per machine, shared by workers
"""
