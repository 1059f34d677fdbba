"""The declared parallelism of a traceset and the ``parallelism_consistency`` check.

The degrees (``dp``, ``tp``, ``sp``, ``ep``, ``pp``) come from ``workloadMetadata.parallelism``;
their product is held against the declared rank count, the world sizes the files record and,
when they record none, the ranks found (the census's ``parallelism_consistent``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tracestore.inspect.census_text import describe_files
from tracestore.inspect.groups import parallelism_values
from tracestore.inspect.model import CensusCheck
from tracestore.metadata import DEGREES


def parallelism_degrees(workload_metadata: object) -> dict[str, int]:
    """The degrees dp, tp, sp, ep, pp given in ``workloadMetadata.parallelism`` (ints ≥ 1)."""
    return parallelism_values(workload_metadata, DEGREES)


def parallelism_product(values: Iterable[int]) -> int:
    """The product of the degrees ``values``."""
    result = 1
    for value in values:
        result *= value
    return result


def parallelism_check(
    degrees: Mapping[str, int],
    product: int | None,
    declared: int | None,
    world_sizes: Mapping[int, list[str]],
    found: list[int],
    by_rank: Mapping[int, list[str]],
) -> CensusCheck:
    """The ``parallelism_consistency`` check: ``product`` (of ``degrees``) against the
    declared rank count, each recorded world size and, with none recorded, the ranks found."""
    if product is None:
        return CensusCheck(True, f"no parallelism degrees ({', '.join(DEGREES)}) declared")
    formula = " × ".join(f"{k} {v}" for k, v in degrees.items())
    what = f"parallelism product {product} ({formula})"
    problems: list[str] = []
    if declared is not None and declared != product:
        problems.append(f"{what} differs from the declared rank count {declared}")
    for size, names in sorted(world_sizes.items()):
        if size != product:
            problems.append(f"{what} differs from world_size {size} in {describe_files(names)}")
    if not world_sizes and found and found[-1] + 1 != product:
        top = found[-1]
        problems.append(
            f"{what} differs from the {top + 1} ranks the files evidence "
            f"(highest rank {top} in {describe_files(by_rank[top])})"
        )
    if problems:
        return CensusCheck(False, "; ".join(problems))
    evidence = "the files' world_size" if world_sizes else "the ranks found"
    return CensusCheck(True, f"{what} matches the declared rank count and {evidence}")
