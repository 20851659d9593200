"""fidelity family (placeholder until written)."""
