"""Clause families. Importing this package registers every clause, in catalogue order."""

from . import (  # noqa: F401 - imported for registration
    ancestry,
    capabilities,
    concurrency,
    contract,
    corruption,
    durability,
    expiry,
    faults_http,
    faults_server,
    fencing,
    fidelity,
    identifiers,
    isolation,
    lifecycle,
    nested,
    ordering,
    retention,
    runner,
    scale,
    signature,
)
