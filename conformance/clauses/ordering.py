"""ordering family (placeholder until written)."""
