"""CI's fixed sample of bench/mutation.py: a handful of mutants of the worked example, each killed
by the kit (or on the committed list of equivalent mutants), and the unmutated module passing, so
the harness itself can fail both ways."""

from __future__ import annotations

from bench.mutation import TARGETS, equivalents, mutate, run_mutant, sample

SEED = 8
SIZE = 6
FAMILIES = [
    "contract",
    "ordering",
    "identifiers",
    "ancestry",
    "corruption",
    "tamper",
    "capabilities",
    "fencing",
]
"""The cheap families: enough to kill this sample, a few seconds a mutant."""


def test_the_unmutated_example_passes_the_sampled_families() -> None:
    verdict = run_mutant(TARGETS["dict"], None, FAMILIES)
    assert verdict.outcome == "survived", verdict.detail


def test_every_sampled_mutant_is_killed_or_known_equivalent() -> None:
    target = TARGETS["dict"]
    known = equivalents().get("dict", {})
    chosen = sample(target, SIZE, SEED)
    assert len(chosen) == SIZE
    source = target.source()
    lived = []
    for mutation in chosen:
        assert mutate(source, mutation) != source, mutation.key
        verdict = run_mutant(target, mutation, FAMILIES)
        if verdict.outcome == "survived" and mutation.key not in known:
            lived.append(mutation.key)
    assert not lived, f"the kit let these mutants of examples/dict_storage.py through: {lived}"
