"""concurrency family (placeholder until written)."""
