"""What schema fuzzing checks besides schemathesis's own checks (tests/test_schema_fuzz.py
names this module in SCHEMATHESIS_HOOKS): a request the OpenAPI description allows is
accepted, unless it breaks a rule the description cannot state. Those rules are listed here
per operation, each with the status and a pattern of the words the service refuses it in
(matched at the message's start); any other
refusal of schema-valid data is a constraint the description misses (schemathesis ST202).

Schemathesis's own ``positive_data_acceptance`` cannot be told these rules but by allowing a
status for the whole operation, which would hide a missing constraint behind it (upload-url's
rank-count rule is a 400, and so is a file name the description would wrongly allow)."""

from __future__ import annotations

import json
import re
from typing import Any

import schemathesis

from tracestore.metadata import MISSING_RANK_COUNT_MESSAGE
from tracestore.server.listing.pages import BAD_CURSOR

# What counts as accepting a well-formed request, as schemathesis's own check counts it.
ACCEPTED = {401, 403, 404, 409, 429}
# A JSON string's lone surrogate is valid JSON Schema data but no Unicode text (issue 41):
# refused with these words wherever a request holds one.
LONE_SURROGATE = "holds a lone surrogate"

_CURSORS = [
    (400, re.escape(BAD_CURSOR))
]  # a cursor of the right form that the service did not sign
_SORT = [(400, "Sort field")]  # a sort field given twice
# The reference's rules upload checks: a product, sizes, a rank count with primaries.
_METADATA = [
    (400, re.escape(MISSING_RANK_COUNT_MESSAGE)),
    (400, "workloadMetadata"),
    (400, re.escape("the parallelism product (dp × tp × sp × ep × pp)")),  # over 2**31 - 1
    (413, ""),  # the body, or the sum of the files' sizes, over its limit
]
_UPLOAD = [
    *_METADATA,
    # A member's snake_case spelling (ttl_days) is read as the member, as the models'
    # field names are; the description names the camelCase ones only.
    (400, r"[a-z0-9]+(?:_[a-z0-9]+)+: input should be"),
    (400, "File names "),  # two names one directory tree cannot hold together
    (400, "File name .* appears more than once$"),
]
RULES: dict[str, list[tuple[int, str]]] = {
    "GET /api/v1/tracesets": [*_CURSORS, *_SORT, (400, "createdAfter"), (400, "createdBefore")],
    "GET /api/v1/libraries": [*_CURSORS, *_SORT, (400, "createdAfter"), (400, "createdBefore")],
    "GET /api/v1/tracesets/{traceset_id}/download": [
        (400, "Give file or ranks, not both"),
        (400, "supporting applies to a download of ranks"),
        (400, "Unknown rank"),  # ranks the traceset's files do not hold
    ],
    "GET /api/v1/tracesets/{traceset_id}/analysis": [
        (400, "ranks: the range"),  # one that ends before it starts
        (400, "ranks: rank .* is beyond"),
        (400, "ranks must list"),  # more pieces than MAX_PIECES
    ],
    "GET /api/v1/tracesets/{traceset_id}/compare": [
        (400, "(baseRanks|otherRanks|steps): the range"),  # one that ends before it starts
        (400, "(baseRanks|otherRanks): rank .* is beyond"),
        (400, "steps: step .* is beyond"),
        (400, "(baseRanks|otherRanks|steps) must list"),  # more pieces than MAX_PIECES
        (400, "(baseRanks|otherRanks): no analysed rank"),  # none the traceset holds
        (400, "baseRanks chooses"),  # as many ranks on each side
    ],
    "POST /api/v1/tracesets/upload-url": _UPLOAD,
    "POST /api/v1/tracesets/upload-url/check": _UPLOAD,  # its dry run: the same refusals
    "POST /api/v1/tracesets/upload-url/census": [
        *_METADATA,
        (400, "File name .* appears more than once$"),
        (400, "head of .* holds"),  # a base64 text of its length may decode past 1 MiB
        (400, "An upload may hold at most"),
    ],
    "POST /api/v1/tracesets/upload-url/complete": [
        (400, ""),  # parts and files that do not match what was sent
        (410, ""),
        (413, ""),
    ],
    "GET /api/v1/tracesets/upload-url/{upload_id}": [(410, "")],
    "POST /api/v1/tracesets/{traceset_id}/promote": [
        (410, ""),
        (412, ""),  # not one step up, or no workloadMetadata
        (422, ""),  # promotion's metadata checks
    ],
    "GET /api/v1/libraries/{library_id}": [(400, "Hash prefix")],
    "PATCH /api/v1/tracesets/{traceset_id}": [
        (400, "Nothing to change"),  # {} and bodies of unknown members only
        (400, "Give tags"),  # tags with addTags or removeTags
        (400, "Tag .* is both in addTags and in removeTags"),
        (400, "A traceset holds at most"),  # more than 64 tags once added
        (409, ""),  # deleted
    ],
}


def _message(response: Any) -> str:
    try:
        return str(json.loads(response.content)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return ""


@schemathesis.check
def described_data_accepted(ctx: Any, response: Any, case: Any) -> bool | None:
    """A request the description allows is not refused but by a rule of RULES."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    status = response.status_code
    if status < 400 or status in ACCEPTED or status >= 500:
        return None  # 5xx is not_a_server_error's to judge
    message = _message(response)
    if LONE_SURROGATE in message:
        return None
    label = f"{case.method.upper()} {case.operation.path}"
    if any(status == code and re.match(rule, message) for code, rule in RULES.get(label, [])):
        return None
    raise AssertionError(
        f"A request the description allows was refused: {status} {message!r}; describe the "
        "constraint in the OpenAPI document, or list the rule it cannot state in "
        "tests/support/schema_fuzz_checks.py"
    )
