"""Pure scheduling core: model, PDA ordering, AdaDUAL admission, local priorities.

No I/O, no gRPC, no kernel: the coordinator and the simulator call the same code.
Nothing is re-exported here, so importing one module (the agent needs only
``common.queues``) does not load the rest: SciPy, numba and HiGHS stay out of the agent.
"""
