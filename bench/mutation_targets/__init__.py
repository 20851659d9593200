"""Honest storages written for ``python -m bench.mutation`` to mutate (bench/mutation.py)."""
