"""The bottom of the dependency graph: what every layer shares and that imports nothing
else of ours (the config error type, validation helpers, flow ids, safe YAML reading,
result output). Layers point down: CLI (``grouper``) -> daemons and simulator
(``agent``, ``coordinator``, ``simulator``, ``topologies``) -> ``workloads`` -> ``pda``
-> ``common``.
"""
