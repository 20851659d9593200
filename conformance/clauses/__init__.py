"""Clause families. Importing this package registers every clause, in catalogue order."""

from . import (  # noqa: F401 - imported for registration
    capabilities,
    concurrency,
    contract,
    corruption,
    durability,
    fidelity,
    identifiers,
    isolation,
    ordering,
)
