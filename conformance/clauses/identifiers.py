"""identifiers family (placeholder until written)."""
