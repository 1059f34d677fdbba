"""The maintenance commands on a service's store: ``gc`` (one sweep), ``reinspect`` and
``signing-key``."""

from __future__ import annotations

from pathlib import Path

import click

from tracestore.cli.common import json_option
from tracestore.cli.output import echo_json
from tracestore.cli.store import store_options, store_services


@click.command()
@store_options
@json_option
def gc(data_dir: Path | None, init: bool, as_json: bool) -> None:
    """Sweep once: delete expired tracesets, fail expired uploads, purge unused bytes.

    Safe to run while servers run on the same data (they sweep on a timer too).
    """
    from tracestore.server.lifecycle import sweep

    with store_services(data_dir, init) as services:
        report = sweep(services)
    if as_json:
        echo_json(report.as_json())
        return
    click.echo(
        f"expired {report.expired_tracesets} tracesets, failed {report.failed_sessions} upload "
        f"sessions, purged {report.purged_blobs} blobs ({report.purged_bytes} bytes)"
        + ("; purge deferred: an upload is completing" if report.purge_deferred else "")
    )


@click.command()
@click.argument("traceset_ids", metavar="TRACESET_ID...", nargs=-1)
@click.option(
    "--missing",
    is_flag=True,
    help="Every ready traceset with no census verdict recorded (inspected by an older version).",
)
@store_options
@json_option
def reinspect(
    traceset_ids: tuple[str, ...], missing: bool, data_dir: Path | None, init: bool, as_json: bool
) -> None:
    """Queue the inspection and analysis of stored tracesets again.

    After an upgrade, `--missing` queues every traceset an older version inspected (its
    census unknown, no inspected.* facts, no analysis). What each had recorded is replaced
    when its jobs run: the workers (serve's in-process worker, or `tracestore worker`) do
    the work. Safe to run while servers run, and again: nothing is queued twice.
    """
    if bool(traceset_ids) == missing:
        raise click.UsageError("Give TRACESET_ID... or --missing (one of them)")
    from tracestore.server.reinspection import reinspect as queue_ids
    from tracestore.server.reinspection import reinspect_missing

    with store_services(data_dir, init) as services:
        report = reinspect_missing(services) if missing else queue_ids(services, traceset_ids)
    if as_json:
        echo_json(report.as_json())
        return
    click.echo(
        f"queued the inspection and analysis of {report.queued} tracesets"
        + (f" ({report.under_way} already under way)" if report.under_way else "")
        + "; the workers (serve's in-process worker, or `tracestore worker`) do the work"
    )


@click.group("signing-key")
def signing_key() -> None:
    """Rotate the key that signs presigned URLs (shared by every process in the database)."""


@signing_key.command("rotate")
@store_options
def signing_key_rotate(data_dir: Path | None, init: bool) -> None:
    """Make a new signing key; URLs signed with the old one stay good until they expire."""
    from tracestore.server.presigned import KEY_REFRESH, rotate_signing_key

    with store_services(data_dir, init) as services:
        if services.settings.signing_key:
            raise click.ClickException(
                "TRACESTORE_SIGNING_KEY is set: the key is that setting's; change it instead"
            )
        lifetime = services.settings.url_lifetime + KEY_REFRESH
        key_id = rotate_signing_key(services.db, services.now(), lifetime)
    click.echo(
        f"signing key {key_id} now signs; the previous one verifies for another {lifetime} "
        f"(every process picks the new one up within {KEY_REFRESH})"
    )


COMMANDS: tuple[click.Command, ...] = (gc, reinspect, signing_key)
