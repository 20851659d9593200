"""durability family (placeholder until written)."""
