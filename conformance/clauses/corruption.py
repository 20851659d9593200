"""corruption family (placeholder until written)."""
