"""Use case: promote a traceset one scope up (docs/api.md).

``workspace`` → ``tenant`` → ``public``. Checks run in the reference's order, each failure
with its own status: 404 (unknown, invisible, or not writable by the caller), 400 (the body),
403 (``public`` without a tenant admin), 409 (not ``ready``), 410 (past its ``expiresAt``,
as download answers, even before the sweeper deletes it), 412 (not one step up), 412 (no
workloadMetadata anywhere), 422 (the typed model and the rank-count guard of
``tracestore.metadata``), then 409 when the traceset fails its recorded census (unless the
body says ``force: true``): a promoted traceset is shown to others and never expires, so an
incomplete one is not promoted without a word. Already at the target answers 200 with
``promotionApplied: false`` and changes nothing, whatever else the body holds.
"""

from __future__ import annotations

from typing import Any

from tracestore import jsontext, metadata, schemas
from tracestore.errors import (
    Conflict,
    Forbidden,
    Gone,
    PreconditionFailed,
    UnprocessableEntity,
    ValidationError,
    shortened,
)
from tracestore.inspect import parallelism_degrees
from tracestore.server import db, jobs
from tracestore.server.auth import Principal
from tracestore.server.inspection import stored_census_checks
from tracestore.server.request_bodies import parse_json_body
from tracestore.server.services import Services
from tracestore.server.tracesets import find_writable, store_metadata, store_tags

TARGETS: dict[str, schemas.Scope] = {"tenant": "tenant", "public": "public"}
NEXT_SCOPE = {"workspace": "tenant", "tenant": "public"}
PUBLIC_NEEDS_ADMIN = "Promotion to public needs a tenant admin"


def parse_promote_request(body: bytes) -> schemas.PromoteRequest:
    """The promotion body (an empty body is ``{}``), numbers kept as written. Raises 400."""
    if not body.strip():
        return schemas.PromoteRequest()
    request = parse_json_body(body, schemas.PromoteRequest)
    if request.target not in TARGETS:
        raise ValidationError(
            f"target must be 'tenant' or 'public', got {jsontext.value_text(request.target)}"
        )
    return request


def _checked_new_metadata(given: Any, traceset_id: str, held: int | None) -> None:
    """The metadata checks (422): size as at upload, then the typed model and the guard."""
    if isinstance(given, dict):
        try:
            metadata.check_metadata_size(given)
        except ValidationError as exc:
            raise UnprocessableEntity(exc.message) from None
    metadata.check_promotion_metadata(given, traceset_id=traceset_id, held_rank_count=held)


def _check_stored_metadata(traceset: db.Traceset) -> None:
    """Promotion's checks (422) of the workloadMetadata upload stored: as given, members it
    does not check included; the refusal says how to promote all the same."""
    stored = jsontext.loads(traceset.metadata_text or "null")
    try:
        metadata.check_promotion_metadata(
            stored, traceset_id=traceset.id, held_rank_count=traceset.rank_count
        )
    except UnprocessableEntity as exc:
        raise UnprocessableEntity(
            f"{exc.message} (in the workloadMetadata stored at upload, which keeps members as "
            "given); promote with workloadMetadata in the request body that corrects it"
        ) from None


# The recorded checks that judge a traceset at promotion. New metadata in the body is
# judged on rank_census alone: the others judged the degrees it replaces, and the rank count
# the census counts against cannot change.
CENSUS_GATE = ("rank_census", "parallelism_consistency", "process_groups")
NEW_METADATA_GATE = ("rank_census",)
# The most of each failed check's message a refusal repeats.
MESSAGE_SHOWN = 400


def census_refusal(traceset: db.Traceset, *, metadata_replaced: bool) -> Conflict | None:
    """The 409 a promotion of ``traceset`` answers when its recorded census fails (not
    yet inspected is no failure), naming each failed check with its message."""
    judged = NEW_METADATA_GATE if metadata_replaced else CENSUS_GATE
    failed = [
        f"{check['name']}: {shortened(str(check.get('message')), MESSAGE_SHOWN)}"
        for check in stored_census_checks(traceset) or []
        if check["name"] in judged and check.get("passed") is False
    ]
    if not failed:
        return None
    return Conflict(
        f"Traceset '{traceset.id}' fails its census: {'; '.join(failed)}; fix its files or "
        "metadata, or promote it as it is with force: true"
    )


def promote_traceset(
    services: Services, principal: Principal, traceset_id: str, body: bytes
) -> schemas.PromoteAnswer:
    """Promote the traceset to the body's ``target`` (default ``tenant``); see the module."""
    with services.db.session() as session:
        traceset = find_writable(session, principal, traceset_id)
        # Lock the row (PostgreSQL) so two promotions of one traceset apply once.
        session.refresh(traceset, with_for_update=True)
        request = parse_promote_request(body)
        target = TARGETS[request.target]
        if target == "public" and not principal.is_tenant_admin:
            raise Forbidden(PUBLIC_NEEDS_ADMIN)
        if traceset.status != "ready":
            raise Conflict(
                f"Traceset '{traceset.id}' is {traceset.status}; only a ready traceset can be "
                "promoted"
            )
        now = services.now()
        if traceset.expires_at is not None and traceset.expires_at <= now:
            # As download answers: past its expiry, a traceset is not revived by its next use.
            raise Gone(
                f"Traceset '{traceset.id}' expired at "
                f"{schemas.format_timestamp(traceset.expires_at)}"
            )
        if traceset.scope == target:
            return schemas.PromoteAnswer(id=traceset.id, scope=target, promotion_applied=False)
        if NEXT_SCOPE.get(traceset.scope) != target:
            step = NEXT_SCOPE.get(traceset.scope)
            hint = f"; promote it to {step} first" if step else ""
            raise PreconditionFailed(
                f"Traceset '{traceset.id}' is {traceset.scope}; it cannot be promoted to "
                f"{target}: promotion goes one step up (workspace → tenant → public){hint}"
            )

        given = request.workload_metadata
        if given is None and traceset.metadata_text is None:
            raise PreconditionFailed(
                f"Traceset '{traceset.id}' has no workloadMetadata; promotion needs it: "
                "send workloadMetadata in the request body"
            )
        if given is None:
            _check_stored_metadata(traceset)
        else:
            _checked_new_metadata(given, traceset.id, traceset.rank_count)
        if not request.force:
            refusal = census_refusal(traceset, metadata_replaced=given is not None)
            if refusal is not None:
                raise refusal
        if given is not None:
            reinspect = parallelism_degrees(given) != parallelism_degrees(
                traceset.workload_metadata
            )
            store_metadata(traceset, given)
            if reinspect:  # the recorded census judged the degrees it replaces
                jobs.enqueue(
                    session,
                    jobs.INSPECT,
                    traceset.id,
                    now,
                    dedupe_key=f"{jobs.INSPECT}:{traceset.id}",
                )

        if request.description is not None:
            traceset.description = request.description
        if request.tags is not None:
            store_tags(session, traceset, request.tags)
        traceset.scope = target
        traceset.expires_at = None
        traceset.updated_at = now
    if given is not None:
        services.wake_worker()
    return schemas.PromoteAnswer(id=traceset.id, scope=target, promotion_applied=True)
