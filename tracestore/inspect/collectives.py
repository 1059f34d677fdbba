"""One vocabulary for collective operations across trace formats.

Kineto writes ``record_param_comms`` (with a ``Collective name`` argument in recent PyTorch),
backend annotations such as ``nccl:all_reduce``, ``c10d::allreduce_`` ops and NCCL kernels
(``ncclKernel_AllReduce_RING_LL_Sum_float(...)``, ``ncclDevKernel_AllGather_RING_LL(...)``);
Chakra records a ``CollectiveCommType`` enum. All of them map to the snake_case names below.
"""

from __future__ import annotations

import re

# Order matters: the first key contained in a squashed name wins.
_CANONICAL: tuple[tuple[str, str], ...] = (
    ("alltoall", "all_to_all"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("sendrecv", "send_recv"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("reduce", "reduce"),
    ("send", "send"),
    ("recv", "recv"),
)

# Names record_param_comms also writes for calls that are no collective: waiting on a work
# handle, communicator set-up, the end of a coalesced batch (squashed as ``canonical`` does).
_NOT_COLLECTIVES = frozenset({"wait", "init", "broadcastuniquencclid", "coalesced"})

_KERNEL_RE = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)")
_ANNOTATION_PREFIXES = ("nccl:", "gloo:", "ucc:", "mpi:")


def canonical(name: str) -> str:
    """``allreduce``, ``all_reduce``, ``AllReduce``, ``_allgather_base`` → ``all_reduce`` ..."""
    squashed = re.sub(r"[^a-z0-9]", "", name.lower())
    for key, value in _CANONICAL:
        if key in squashed:
            return value
    return squashed or name


def is_collective(name: str) -> bool:
    """False for the bookkeeping names (``wait``, ``init``, ``broadcastUniqueNCCLID``)."""
    return re.sub(r"[^a-z0-9]", "", name.split(":", 1)[-1].lower()) not in _NOT_COLLECTIVES


def host_record(name: str) -> str | None:
    """Which host-side record of a collective call an event or node named ``name`` is:
    ``"annotation"`` (``nccl:all_reduce``, ``gloo:broadcast`` ...), ``"c10d"``
    (``c10d::allreduce_``), or None (a kernel, or another name)."""
    if name.startswith(_ANNOTATION_PREFIXES):
        return "annotation"
    return "c10d" if name.startswith("c10d::") else None


HOST_RECORDS = ("annotation", "c10d")  # the order ``summarize`` prefers them in


def event_name(raw: str) -> str:
    """An event name as reported: kernel names lose their ``(argument list)``."""
    if raw.startswith(("nccl", "rccl")) and "Kernel_" in raw:
        return raw.split("(", 1)[0].strip()
    return raw


def summarize(
    events: dict[str, int], named: dict[str, int]
) -> tuple[dict[str, int], dict[str, int]]:
    """``(collective_events, collectives)`` from raw event-name counts.

    ``named`` counts the ``Collective name`` arguments of ``record_param_comms`` events. One
    collective call shows up several times (CPU op, backend annotation, GPU kernel), so the
    canonical counts come from a single source, the first present of: record_param_comms
    collective names, backend annotations (``nccl:*``), ``c10d::*`` ops, GPU kernels.
    ``wait`` and the other bookkeeping names are not collectives in any format.
    """
    named = {name: count for name, count in named.items() if is_collective(name)}
    raw: dict[str, int] = {}
    for name, count in events.items():
        shown = event_name(name)
        raw[shown] = raw.get(shown, 0) + count
    annotations = {k: v for k, v in raw.items() if host_record(k) == "annotation"}
    c10d = {k: v for k, v in raw.items() if host_record(k) == "c10d"}
    kernels: dict[str, int] = {}
    for name, count in raw.items():
        if match := _KERNEL_RE.match(name):
            kernels[match.group(1)] = kernels.get(match.group(1), 0) + count
    for source in (named, annotations, c10d, kernels):
        if source:
            return raw, _canonical_counts(source)
    return raw, {}


def _canonical_counts(counts: dict[str, int]) -> dict[str, int]:
    result: dict[str, int] = {}
    for name, count in counts.items():
        if not is_collective(name):
            continue
        key = canonical(name.split(":", 1)[-1])
        result[key] = result.get(key, 0) + count
    return result
