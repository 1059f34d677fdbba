"""MLCommons Chakra execution traces (``.et``): one rank's graph of operations.

The file is a sequence of varint-length-delimited protobuf messages: a ``GlobalMetadata``
(``version = 1``, ``attr = 2``; newer writers leave ``version`` empty and start with the
attributes ``schema``, ``pid``, ``time`` ...), then ``Node`` messages (``id = 1``,
``name = 2``, ``type = 3``, ..., ``inputs = 8``, ``attr = 10``; see Chakra's
``et_def.proto``). The rank comes from the ``record_param_comms`` nodes the PyTorch converter
keeps (their ``inputs.values`` is the row ``param_comms`` reads) and otherwise from the
``<prefix>.<rank>.et`` file name.

Collectives are the COMM_COLL_NODEs, by their ``comm_type``. Chakra's older PyTorch converter
also typed the host-side ops of each call (``c10d::allreduce_``, ``nccl:all_reduce``) as
COMM_COLL_NODEs, without ``comm_type``: those are the same calls as the GPU nodes, so they
count only in a trace without typed nodes, and then by name from one kind of them (as
``collectives.summarize`` does), never as ``unknown``.

Counting node types has to touch every node, so the loop below reads the ``type`` field
without decoding the whole message (serializers write fields in field-number order, so
``id`` and ``name`` come first); only communication nodes have their attributes decoded.
"""

from __future__ import annotations

import re
from dataclasses import replace

from tracestore.inspect.chakra_attrs import (
    attribute,
    find_int_attribute,
    find_string_attribute,
    is_global_metadata,
)
from tracestore.inspect.collectives import HOST_RECORDS, canonical, host_record, is_collective
from tracestore.inspect.model import Draft, InspectionError, ProcessGroup
from tracestore.inspect.param_comms import RankVote, comm_row
from tracestore.inspect.protowire import (
    LENGTH_DELIMITED,
    VARINT,
    WireError,
    iter_fields,
    read_varint,
)
from tracestore.inspect.streams import BinaryReader, read_chunk

CHUNK_SIZE = 4 * 1024 * 1024
MAX_MESSAGE = 64 * 1024 * 1024

NODE_TYPES: dict[int, str] = {
    0: "INVALID_NODE",
    1: "METADATA_NODE",
    2: "MEM_LOAD_NODE",
    3: "MEM_STORE_NODE",
    4: "COMP_NODE",
    5: "COMM_SEND_NODE",
    6: "COMM_RECV_NODE",
    7: "COMM_COLL_NODE",
    8: "STORAGE_NODE",
    9: "BATCH_NODE",
    10: "CHECKPOINT_NODE",
}
COMM_COLL_NODE = 7
UNKNOWN_COLLECTIVE = -1  # a COMM_COLL_NODE without comm_type: not the enum's default 0
COLLECTIVE_TYPES: dict[int, str] = {
    0: "ALL_REDUCE",
    1: "REDUCE",
    2: "ALL_GATHER",
    3: "GATHER",
    4: "SCATTER",
    5: "BROADCAST",
    6: "ALL_TO_ALL",
    7: "REDUCE_SCATTER",
    8: "REDUCE_SCATTER_BLOCK",
    9: "BARRIER",
    UNKNOWN_COLLECTIVE: "unknown",
}
_COLLECTIVE_BY_NAME: dict[str, int] = {}
for _number, _name in COLLECTIVE_TYPES.items():
    if _number != UNKNOWN_COLLECTIVE:
        _COLLECTIVE_BY_NAME.setdefault(canonical(_name), _number)
# Node field number -> wire types allowed (repeated scalars may be packed).
_NODE_FIELDS: dict[int, tuple[int, ...]] = {
    1: (VARINT,),
    2: (LENGTH_DELIMITED,),
    3: (VARINT,),
    4: (VARINT, LENGTH_DELIMITED),
    5: (VARINT, LENGTH_DELIMITED),
    6: (VARINT,),
    7: (VARINT,),
    8: (LENGTH_DELIMITED,),
    9: (LENGTH_DELIMITED,),
    10: (LENGTH_DELIMITED,),
    11: (LENGTH_DELIMITED,),
}
_RECORD_PARAM_COMMS = b"record_param_comms"
_COMPRESSED = r"(?:\.(?:gz|gzip|zst|zstd))?$"
_RANK_NAMES = {
    "chakra_et": (
        re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et" + _COMPRESSED),
        "<prefix>.<rank>.et",
    ),
    "chakra_json": (
        re.compile(r"^(?P<prefix>.+?)[._](?P<rank>\d+)\.json" + _COMPRESSED),
        "<prefix>.<rank>.json or <prefix>_<rank>.json",
    ),
}


def rank_from_name(name: str, fmt: str = "chakra_et") -> tuple[str, int] | None:
    """``(prefix, rank)`` of a ``<prefix>.<rank>.et`` name, or for ``fmt="chakra_json"`` a
    ``<prefix>.<rank>.json`` or ``<prefix>_<rank>.json`` one (path and .gz/.zst ignored)."""
    pattern = _RANK_NAMES.get(fmt)
    match = pattern[0].match(name.rsplit("/", 1)[-1]) if pattern else None
    if match is None:
        return None
    return match["prefix"], int(match["rank"])


def rank_by_name(draft: Draft) -> None:
    """Take the rank from the file's (or archive member's) ``<prefix>.<rank>`` name."""
    found = rank_from_name(draft.name, draft.format)
    if found is None:
        return
    draft.rank = found[1]
    draft.rank_source = "memberName" if draft.nested else "filename"
    what = "archive member name" if draft.nested else "file name"
    draft.rank_provenance = f"{what} {draft.name} ({_RANK_NAMES[draft.format][1]})"


def sniff(head: bytes, name: str) -> bool:
    """Whether ``head`` starts like a Chakra trace.

    A ``GlobalMetadata`` (a printable ``version``, well-formed attributes) is enough; a trace
    that starts directly with a ``Node`` (older writers) is recognised only under a ``.et``
    name.
    """
    try:
        size, start = read_varint(head, 0)
        end = start + size
        if size == 0 or end > len(head):
            return False
        fields = list(iter_fields(head, start, end))
    except (IndexError, WireError):
        return False
    if is_global_metadata(head, fields):
        return True
    named_et = re.search(r"\.et(\.(gz|gzip|zst|zstd))?$", name) is not None
    return named_et and all(f[1] in _NODE_FIELDS.get(f[0], ()) for f in fields)


def scan(stream: BinaryReader, draft: Draft) -> None:
    """Count nodes by type and collectives by type over the whole stream."""
    rank_by_name(draft)
    tally = Tally()
    buf, failure = read_chunk(stream, CHUNK_SIZE)
    draft.bytes_scanned += len(buf)
    offset = pos = 0
    try:
        pos = _metadata(buf, draft)
        while True:
            pos = tally.messages(buf, pos)
            if failure is not None:
                raise failure
            data, failure = read_chunk(stream, CHUNK_SIZE)
            draft.bytes_scanned += len(data)
            if not data:
                break
            offset += pos
            buf, pos = buf[pos:] + data, 0
        if pos < len(buf):
            raise InspectionError(
                f"truncated: the message at byte {offset + pos} is cut off by the end of the "
                f"file ({len(buf) - pos} of its bytes present)"
            )
    except _Malformed as exc:
        raise InspectionError(
            f"malformed protobuf message at byte {offset + exc.pos}{exc.detail}"
        ) from None
    except (WireError, IndexError) as exc:  # in the leading GlobalMetadata
        raise InspectionError(f"malformed GlobalMetadata message: {exc}") from None
    finally:
        tally.store(draft)


def _metadata(buf: bytes, draft: Draft) -> int:
    """Read a leading GlobalMetadata (if there is one); the position after it.

    Its scalar attributes are kept; ``schema`` stands in for an empty ``version`` and
    ``pid`` is the process id.
    """
    try:
        size, start = read_varint(buf, 0)
        if start + size > len(buf):
            return 0
        fields = list(iter_fields(buf, start, start + size))
    except (IndexError, WireError):
        return 0
    if not is_global_metadata(buf, fields):
        return 0  # the trace starts with a Node
    for number, _, a, b in fields:
        if number == 1 and a < b:
            draft.schema_version = buf[a:b].decode("utf-8", "replace")
        elif number == 2 and (found := attribute(buf, a, b)) and found[1] is not None:
            draft.attributes[found[0]] = found[1]
    schema, pid = draft.attributes.get("schema"), draft.attributes.get("pid")
    if draft.schema_version is None and isinstance(schema, str):
        draft.schema_version = schema
    if isinstance(pid, int) and not isinstance(pid, bool):
        draft.pid = pid
    return start + size


class _Malformed(Exception):
    def __init__(self, pos: int, detail: str) -> None:
        super().__init__(detail)
        self.pos = pos
        self.detail = detail


class Calls:
    """Collective calls by ``comm_type``: counts, bytes, and counts per process group."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.bytes: dict[int, int] = {}
        self.by_group: dict[str, dict[int, int]] = {}

    def add(self, comm_type: int, comm_size: int, group: str | None) -> None:
        """Count one call."""
        self.counts[comm_type] = self.counts.get(comm_type, 0) + 1
        self.bytes[comm_type] = self.bytes.get(comm_type, 0) + comm_size
        if group is not None:
            counts = self.by_group.setdefault(group, {})
            counts[comm_type] = counts.get(comm_type, 0) + 1

    def merge(self, other: Calls) -> None:
        """Add ``other``'s calls to these."""
        for kind, count in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + count
            self.bytes[kind] = self.bytes.get(kind, 0) + other.bytes.get(kind, 0)
        for group, counts in other.by_group.items():
            mine = self.by_group.setdefault(group, {})
            for kind, count in counts.items():
                mine[kind] = mine.get(kind, 0) + count


class Tally:
    """Node and collective counts, and the rank vote of record_param_comms nodes."""

    def __init__(self) -> None:
        self.position = 0  # start of the message being read, for error messages
        self.types = [0] * 16
        self.other_types: dict[int, int] = {}
        self.calls = Calls()
        self.host_calls = {record: Calls() for record in HOST_RECORDS}
        self.vote = RankVote()

    def messages(self, buf: bytes, pos: int) -> int:
        """Count the complete messages of ``buf[pos:]``; where the first incomplete one starts."""
        try:
            return self._messages(buf, pos)
        except (WireError, IndexError) as exc:
            raise _Malformed(
                self.position, f": {exc}" if isinstance(exc, WireError) else ""
            ) from None

    def _messages(self, buf: bytes, pos: int) -> int:
        n = len(buf)
        types = self.types
        while pos < n:
            self.position = pos
            size = buf[pos]
            start = pos + 1
            if size >= 0x80:
                try:
                    size, start = read_varint(buf, pos)
                except IndexError:
                    return pos  # the length prefix itself is cut off
                if size > MAX_MESSAGE:
                    raise WireError(f"a message declares {size} bytes")
            end = start + size
            if end > n:
                return pos
            # Fast path to Node.type: skip id (tag 0x08) and name (0x12), read 0x18.
            p = start
            if p < end and buf[p] == 0x08:
                p += 1
                while buf[p] >= 0x80:
                    p += 1
                p += 1
            if p < end and buf[p] == 0x12:
                size = buf[p + 1]
                if size < 0x80:
                    p += 2 + size
                else:
                    size, p = read_varint(buf, p + 1)
                    p += size
                if size == 18 and buf[p - 18 : p] == _RECORD_PARAM_COMMS:
                    self._comm_row(buf, start, end)
            if p < end and buf[p] == 0x18:
                node_type = buf[p + 1]
                if node_type >= 0x80:
                    node_type = read_varint(buf, p + 1)[0]
            else:
                node_type = _node_type(buf, start, end)
            if node_type < 16:
                types[node_type] += 1
            else:
                self.other_types[node_type] = self.other_types.get(node_type, 0) + 1
            if node_type == COMM_COLL_NODE:
                comm_type, comm_size = _comm_attrs(buf, start, end)
                group = find_string_attribute(buf, start, end, b"\x0a\x07pg_name")
                if comm_type == UNKNOWN_COLLECTIVE:
                    self.untyped(_node_name(buf, start, end), comm_size, group)
                else:
                    self.calls.add(comm_type, comm_size, group)
            pos = end
        return pos

    def untyped(self, name: str | None, comm_size: int, group: str | None) -> None:
        """Count a COMM_COLL_NODE without ``comm_type``: a host-side record of a call
        (``c10d::allreduce_``) by its name, for ``store`` to use or drop; else unknown."""
        record = None if name is None else host_record(name)
        if record is None or name is None:
            self.calls.add(UNKNOWN_COLLECTIVE, comm_size, group)
        elif is_collective(name):  # a wait or set-up op is no collective
            kind = _COLLECTIVE_BY_NAME.get(canonical(name.split(":")[-1]), UNKNOWN_COLLECTIVE)
            self.host_calls[record].add(kind, comm_size, group)

    def node(
        self,
        node_type: int,
        comm_type: int | None = None,
        comm_size: int = 0,
        group: str | None = None,
        name: str | None = None,
    ) -> None:
        """Count one node decoded elsewhere (Chakra JSON); ``comm_type`` None: ``untyped``."""
        if node_type < 16:
            self.types[node_type] += 1
        else:
            self.other_types[node_type] = self.other_types.get(node_type, 0) + 1
        if node_type == COMM_COLL_NODE:
            if comm_type is None:
                self.untyped(name, comm_size, group)
            else:
                self.calls.add(comm_type, comm_size, group)

    def _comm_row(self, buf: bytes, start: int, end: int) -> None:
        """Vote with the row in a record_param_comms node's ``inputs.values``."""
        node_id: int | None = None
        for number, wire, a, b in iter_fields(buf, start, end):
            if number == 1 and wire == VARINT:
                node_id = a
            elif number == 8 and wire == LENGTH_DELIMITED:
                for field_number, field_wire, c, d in iter_fields(buf, a, b):
                    if field_number == 1 and field_wire == LENGTH_DELIMITED:
                        text = buf[c:d].decode("utf-8", "replace")
                        if (row := comm_row(text, node_id)) is not None:
                            self.vote.add(row)

    def store(self, draft: Draft) -> None:
        """Write the counts into the draft, with their Chakra and canonical names, and the
        rank the record_param_comms nodes name (over the file name's, which it is
        compared with)."""
        named_rank, named_provenance = draft.rank, draft.rank_provenance
        draft.rank = draft.rank_source = draft.rank_provenance = None
        self.vote.store(draft, kind="record_param_comms COMP_NODE")
        if draft.rank is None:
            draft.rank, draft.rank_provenance = named_rank, named_provenance
            draft.rank_source = (
                None if named_rank is None else ("memberName" if draft.nested else "filename")
            )
        elif named_rank is not None and draft.rank_provenance is not None:
            agrees = "agrees" if named_rank == draft.rank else f"says {named_rank}"
            draft.rank_provenance += f"; the {named_provenance} {agrees}"
        counts = {t: c for t, c in enumerate(self.types) if c} | self.other_types
        draft.node_counts = {NODE_TYPES.get(t, f"NODE_TYPE_{t}"): c for t, c in counts.items()}
        calls = self.calls
        if all(kind == UNKNOWN_COLLECTIVE for kind in calls.counts):  # no typed node
            host = next((c for c in self.host_calls.values() if c.counts), Calls())
            calls.merge(host)
        names = {t: canonical(COLLECTIVE_TYPES.get(t, f"TYPE_{t}")) for t in calls.counts}
        draft.collectives = {names[t]: c for t, c in calls.counts.items()}
        draft.collective_bytes = {names[t]: c for t, c in calls.bytes.items()}
        draft.process_groups = _merged_groups(draft.process_groups, calls.by_group, names)


def _merged_groups(
    recorded: list[ProcessGroup], used: dict[str, dict[int, int]], names: dict[int, str]
) -> list[ProcessGroup]:
    """The groups the rows name (with their sizes) and those the COMM_COLL nodes run on
    (with their collectives), one entry per name, in order of first appearance."""
    merged = {g.name: g for g in recorded}
    for group, counts in used.items():
        found = merged.get(group, ProcessGroup(name=group))
        merged[group] = replace(found, collectives=_group_counts(counts, names))
    return list(merged.values())


def _group_counts(counts: dict[int, int], names: dict[int, str]) -> dict[str, int]:
    return dict(sorted((names[t], c) for t, c in counts.items()))


def _node_name(buf: bytes, start: int, end: int) -> str | None:
    """Node.name, or None when the node has none."""
    for number, wire, a, b in iter_fields(buf, start, end):
        if number == 2 and wire == LENGTH_DELIMITED:
            return buf[a:b].decode("utf-8", "replace")
    return None


def _node_type(buf: bytes, start: int, end: int) -> int:
    """Node.type, for a node whose fields are not in the usual order."""
    for number, wire, value, _ in iter_fields(buf, start, end):
        if number == 3 and wire == VARINT:
            return value
    return 0  # proto3 leaves out the default, INVALID_NODE


def _comm_attrs(buf: bytes, start: int, end: int) -> tuple[int, int]:
    """``(comm_type, comm_size)`` from a node's attributes: ``UNKNOWN_COLLECTIVE`` when it
    has no comm_type (proto3 omits a 0 only outside a oneof, and attribute values are in
    one, so a missing comm_type was never written), 0 bytes when it has no comm_size."""
    comm_type = find_int_attribute(buf, start, end, b"\x0a\x09comm_type")
    comm_size = find_int_attribute(buf, start, end, b"\x0a\x09comm_size")
    return UNKNOWN_COLLECTIVE if comm_type is None else comm_type, comm_size or 0
