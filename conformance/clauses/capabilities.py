"""capabilities family (placeholder until written)."""
