"""Chakra execution traces as JSON: what Chakra's tools write besides the protobuf stream.

Three forms are read, all in protobuf's JSON mapping (``"type": "COMM_COLL_NODE"``, 64-bit
integers as strings, attribute values under ``int64Val``, ``stringVal`` ... or their
snake_case names):

- chakra_jsonizer output: concatenated objects, the ``GlobalMetadata`` first
  (``{"version": ...}`` or ``{"attr": [...]}``), then one object per ``Node``;
- ``{"workload_graph": [node, ...]}`` (also ``{"nodes": [...]}`` without a PyTorch schema);
- a bare array of nodes.

Chakra's feeder reads ``{"workload_graph": [...]}`` files whose nodes are flat instead:
``Id``, ``Name``, an integer ``NodeType`` (``et_def.proto``'s numbers: 4 = COMP_NODE,
7 = COMM_COLL_NODE) and top-level ``comm_type``, ``comm_size`` ... (its ``json_node.cpp``);
those are read as well.

Nothing inside names a rank but a ``record_param_comms`` node's row (as in the protobuf
form); otherwise the rank comes from a ``<prefix>.<rank>.json`` or ``<prefix>_<rank>.json``
name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tracestore.inspect.chakra import (
    COLLECTIVE_TYPES,
    NODE_TYPES,
    Tally,
    rank_by_name,
)
from tracestore.inspect.jsonvalues import iter_values
from tracestore.inspect.model import AttributeValue, Draft
from tracestore.inspect.param_comms import comm_row
from tracestore.inspect.streams import BinaryReader

ARRAY_KEYS = ("workload_graph", "nodes")
_NODE_TYPE_NUMBERS = {name: number for number, name in NODE_TYPES.items()}
_COLLECTIVE_NUMBERS = {name: number for number, name in COLLECTIVE_TYPES.items()}
_NODE_TYPE_RE = re.compile(
    rb'"type"\s*:\s*"(?:'
    + b"|".join(re.escape(name.encode()) for name in NODE_TYPES.values())
    + rb')"'
)
_WRAPPER_RE = re.compile(rb'^\s*\{\s*"workload_graph"\s*:\s*\[')
_METADATA_KEYS = frozenset({"version", "attr", "attribute"})


def sniff(head: bytes) -> bool:
    """Whether a JSON ``head`` looks like one of the forms above: a ``workload_graph``
    wrapper, or a node with a Chakra node type."""
    return _WRAPPER_RE.match(head) is not None or _NODE_TYPE_RE.search(head) is not None


def scan(stream: BinaryReader, draft: Draft) -> None:
    """Count nodes and collectives, read the metadata and the rank."""
    rank_by_name(draft)
    tally = Tally()
    try:
        for index, item in enumerate(iter_values(stream, draft, array_keys=ARRAY_KEYS)):
            if not isinstance(item, dict):
                continue
            if index == 0 and _METADATA_KEYS.issuperset(item) and item:
                _metadata(item, draft)
            else:
                _node(item, tally)
    finally:
        tally.store(draft)


def attribute_values(entries: Any) -> dict[str, AttributeValue]:
    """``{name: scalar value}`` of a JSON ``attr`` list (lists and bytes are left out)."""
    values: dict[str, AttributeValue] = {}
    if not isinstance(entries, list):
        return values
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        for key, value in entry.items():
            if key in ("name", "docString", "doc_string"):
                continue
            scalar = _scalar(key, value)
            if scalar is not None:
                values[entry["name"]] = scalar
            break
    return values


def _scalar(key: str, value: Any) -> AttributeValue | None:
    kind = key.lower().replace("_", "")
    if isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if kind.startswith(("int", "uint", "sint", "fixed", "sfixed")):
            try:
                return int(value)
            except ValueError:
                return None
        if kind.startswith(("double", "float")):
            try:
                return float(value)
            except ValueError:
                return None
        return value if kind.startswith("string") else None
    return None


def _metadata(item: Mapping[str, Any], draft: Draft) -> None:
    draft.attributes.update(attribute_values(item.get("attr", item.get("attribute"))))
    version, schema = item.get("version"), draft.attributes.get("schema")
    if isinstance(version, str) and version:
        draft.schema_version = version
    elif isinstance(schema, str):
        draft.schema_version = schema
    pid = draft.attributes.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        draft.pid = pid


_FLAT_ATTRIBUTES = ("comm_type", "comm_size", "pg_name")  # the feeder's nodes hold them flat


def _node(item: Mapping[str, Any], tally: Tally) -> None:
    raw_type = item.get("type", item.get("NodeType", 0))
    node_type = _NODE_TYPE_NUMBERS.get(raw_type) if isinstance(raw_type, str) else raw_type
    if not isinstance(node_type, int) or isinstance(node_type, bool):
        return
    attrs = attribute_values(item.get("attr", item.get("attribute")))
    for key in _FLAT_ATTRIBUTES:
        if key not in attrs and isinstance(value := item.get(key), int | str):
            attrs[key] = value
    name = item.get("name", item.get("Name"))
    comm_type = attrs.get("comm_type")
    if isinstance(comm_type, str):
        comm_type = _COLLECTIVE_NUMBERS.get(comm_type)
    size, group = attrs.get("comm_size"), attrs.get("pg_name")
    tally.node(
        node_type,
        comm_type if isinstance(comm_type, int) and not isinstance(comm_type, bool) else None,
        size if isinstance(size, int) and not isinstance(size, bool) else 0,
        group if isinstance(group, str) else None,
        name if isinstance(name, str) else None,
    )
    if name == "record_param_comms":
        inputs = item.get("inputs")
        values = inputs.get("values") if isinstance(inputs, Mapping) else None
        node_id = item.get("id", item.get("Id"))
        number = int(node_id) if isinstance(node_id, int | str) and str(node_id).isdigit() else None
        if (row := comm_row(values, number)) is not None:
            tally.vote.add(row)
