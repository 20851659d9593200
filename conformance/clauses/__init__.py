"""Clause families. Importing this package registers every clause, in catalogue order."""

from . import (  # noqa: F401 - imported for registration
    ancestry,
    capabilities,
    concurrency,
    contract,
    corruption,
    durability,
    faults_http,
    faults_server,
    fidelity,
    identifiers,
    isolation,
    nested,
    ordering,
    retention,
    runner,
    signature,
    tamper,
)
