"""Benchmarks: our storages and codec as ratios against raw backends and MAF's own storages.

Run ``python -m bench.run --help``. Figures live in ``docs/benchmarks.md``.
"""
