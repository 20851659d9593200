"""isolation family (placeholder until written)."""
