"""Job-level simulation: GPU placement and all-reduce scheduling (``--mode jobs``)."""
