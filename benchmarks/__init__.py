"""grouper's asv suite: see asv.conf.json and docs/results/benchmarks.md."""
