"""ASTRA-sim communicator-group files: ``{"<pg_name>": [rank, ...], ...}`` beside Chakra traces.

The file names the members of every process group the traces' ``pg_name`` attributes refer
to (``comm_group.json``, symbolic_tensor_graph's ``<name>.json``). It is small, so it is read
whole from the head the format was sniffed from; the census checks each Chakra trace's groups
against it and takes the world size from the union of its members.
"""

from __future__ import annotations

import json
from typing import Any

from tracestore.inspect.model import Draft, ProcessGroup
from tracestore.inspect.streams import HEAD_SIZE, BinaryReader, read_up_to


def groups_in(head: bytes) -> dict[str, list[int]] | None:
    """The groups of a whole comm-group document, or None when ``head`` is not one."""
    if len(head) >= HEAD_SIZE:
        return None  # larger than any comm-group file; not read whole
    try:
        document: Any = json.loads(head)
    except ValueError:
        return None
    if not isinstance(document, dict) or not document:
        return None
    for name, ranks in document.items():
        if not name.isdigit() or not isinstance(ranks, list) or not ranks:
            return None
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
            return None
    return document


def scan(stream: BinaryReader, draft: Draft) -> None:
    """List the groups with their members."""
    head = read_up_to(stream, HEAD_SIZE)
    draft.bytes_scanned += len(head)
    for name, ranks in (groups_in(head) or {}).items():
        draft.process_groups.append(ProcessGroup(name=name, size=len(ranks), ranks=tuple(ranks)))
