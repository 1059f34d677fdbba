"""What the client commands print: tables, JSON, progress bars and the error table.

Every string a service or a trace file gave (names, descriptions, tags, messages, archive
members) goes through ``shown`` before a terminal sees it: its control characters are
printed as escapes (``\\x1b``), never obeyed. ``--json`` prints exact JSON instead."""

from __future__ import annotations

import re
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from tracestore import jsontext
from tracestore.errors import TracestoreError, UploadIncomplete

if TYPE_CHECKING:  # pydantic and httpx load only in the commands that use them
    from tracestore import schemas
    from tracestore.client.retries import RetryWait
    from tracestore.client.transfers import ProgressCallback, ProgressEvent

# One line per error code: what to do next. The message itself comes from the service.
NEXT_STEPS: dict[str, str] = {
    "VALIDATION_ERROR": "Fix what the message names and run the command again.",
    "UNAUTHORIZED": "Check the token: --token, TRACESTORE_TOKEN, or the server's "
    "<data-dir>/admin-token.",
    "FORBIDDEN": "You are not a member of that workspace, or the link expired (ask for a "
    "new one); the service's admin can add you to a workspace.",
    "NOT_FOUND": "Check the id with `tracestore ls` (another workspace's tracesets are not "
    "visible to you).",
    "METHOD_NOT_ALLOWED": "The service does not offer this operation; is it an older version?",
    "ROUTE_NOT_OFFERED": "The service does not offer this operation; is it an older version?",
    "NO_SERVICE_AT_URL": "Check --url / TRACESTORE_URL: the service's root, as `tracestore "
    "serve` prints it (for example http://127.0.0.1:8000), not a page or an API path.",
    "MULTIPLE_CHOICES": "The prefix matches several; give more characters or one of the ids "
    "the message names.",
    "CONFLICT": "The traceset is not in a state that allows this; check it with "
    "`tracestore show ID`.",
    "GONE": "The upload session has expired (24 h); upload again without --resume.",
    "PRECONDITION_FAILED": "Promote one step at a time (workspace → tenant → public) and give "
    "workload metadata (--workload-metadata FILE).",
    "PAYLOAD_TOO_LARGE": "A file is larger than declared (did it change?); upload it again.",
    "UNPROCESSABLE_ENTITY": "Fix the workload metadata as the message says: snake_case "
    "descriptive members, and the same rank count as at upload.",
    "TOO_MANY_REQUESTS": "The service limits how many parts of one upload arrive at once; "
    "retry, or lower --concurrency.",
    "INTERNAL_ERROR": "The service failed; retry, or give its operator the request id.",
    "NOT_IMPLEMENTED": "The service deliberately does not offer this route.",
    "SERVICE_UNAVAILABLE": "The service's database or blob store is down; retry later.",
    "NETWORK_ERROR": "Is the service running? Start one with `tracestore serve`, or point "
    "--url / TRACESTORE_URL at it.",
    "INTEGRITY_ERROR": "The bytes do not match what the service recorded; run the command "
    "again (downloads resume, mismatching ones start over).",
    "UPLOAD_INCOMPLETE": "Resume it with the command below once the cause is fixed.",
}

# Where one command's error of a code needs other words than NEXT_STEPS's.
COMMAND_STEPS: dict[tuple[str, str], str] = {
    ("promote", "FORBIDDEN"): "Promotion to public needs a tenant admin of your tenant: ask "
    "one to promote it.",
    ("promote", "UNPROCESSABLE_ENTITY"): "Promote with the metadata corrected: `tracestore "
    "promote ID --workload-metadata FILE` (whole numbers as JSON numbers, snake_case "
    "descriptive members, the rank count of the upload).",
    ("promote", "CONFLICT"): "Check it with `tracestore validate ID`: a traceset that is not "
    "ready cannot be promoted; one that fails its census can, as it is, with --force.",
}


# What a terminal would obey rather than show: C0 controls and DEL, C1 controls (``\x9b`` is
# CSI on some terminals), the bidirectional overrides and isolates (text shown reordered),
# and lone surrogates (a local name of bytes that are not UTF-8; no stream could write one).
_UNSHOWN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def shown(text: object) -> str:
    """``text`` as a terminal may print it: every character it would obey instead of show
    written as its escape (``\\x1b``, ``\\u202e``); everything else as it is."""
    return _UNSHOWN.sub(_escape, str(text))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def echo_shown(text: object, *, err: bool = False) -> None:
    """One line of a service's or a trace file's words, escaped (``shown``)."""
    click.echo(shown(text), err=err)


# The client commands a next step may name; they repeat the --url the command was given.
_CLIENT_COMMAND = re.compile(r"`tracestore (upload|ls|show|promote|download|validate|rm)\b")


def with_url(text: str, url: str | None) -> str:
    """``text`` with ``--url URL`` added to every client command it quotes (when given)."""
    if url is None:
        return text
    return _CLIENT_COMMAND.sub(lambda m: f"{m.group(0)} --url {shlex.quote(url)}", text)


def error_lines(
    exc: TracestoreError, url: str | None = None, command: str | None = None
) -> list[str]:
    """The error as the CLI prints it: the message, then the next step (``command``'s own,
    else its code's; its commands with the ``url`` the command was given), then the
    request id."""
    code = exc.cause.code if isinstance(exc, UploadIncomplete) and exc.cause else exc.code
    lines = [f"Error: {shown(exc.message)}"]
    step = COMMAND_STEPS.get((command or "", code)) or NEXT_STEPS.get(
        code, NEXT_STEPS["INTERNAL_ERROR"]
    )
    lines.append(f"  {with_url(step, url)}")
    if exc.request_id:
        lines.append(f"  (request id {shown(exc.request_id)})")
    return lines


def echo_json(value: Any) -> None:
    """JSON on stdout; workloadMetadata numbers as the service stored them. A lone surrogate
    (a trace file's ``"\\ud800"``, a local name of bytes that are not UTF-8) is written as
    its JSON escape: the same string to any JSON reader, where no stream could write it."""
    click.echo(_LONE_SURROGATE.sub(_json_escape, jsontext.dumps(value)))


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def wire(model: schemas.WireModel | schemas.SnakeWireModel) -> Any:
    from tracestore import schemas

    """A response model back to its wire JSON (camelCase), metadata kept as given."""
    return schemas.wire_dict(model)


def size_text(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain aligned columns (script-friendly, no truncation), every cell ``shown``."""
    rows = [[shown(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def timestamp(value: Any) -> str:
    from tracestore import schemas

    return schemas.format_timestamp(value) if value is not None else "-"


def census_text(verdict: str, missing: int | None) -> str:
    """A list item's census verdict: ``pass``; ``FAIL`` (with the ranks missing, when some
    are), so an incomplete traceset never reads like a complete one; ``unknown`` until
    inspected."""
    if verdict != "fail":
        return verdict
    return f"FAIL ({missing} missing)" if missing else "FAIL"


def list_rows(items: Sequence[schemas.TracesetListItem]) -> str:
    rows = []
    for item in items:
        workload = " / ".join(
            str(v) for v in (item.workload.workload_family, item.workload.workload_name) if v
        )
        rows.append(
            [
                item.id,
                item.name,
                item.status,
                census_text(item.census, item.missing_ranks),
                item.scope,
                str(item.file_count),
                size_text(item.total_size),
                "-" if item.rank_count_derived is None else str(item.rank_count_derived),
                timestamp(item.created_at),
                item.created_by.name if item.created_by else "-",
                workload or "-",
            ]
        )
    headers = [
        *("ID", "NAME", "STATUS", "CENSUS", "SCOPE", "FILES", "SIZE", "RANKS", "CREATED"),
        "UPLOADER",
        "WORKLOAD",
    ]
    return table(headers, rows)


_CENSUS_CHECKS = {
    "rankCountMatches": "rank census",
    "parallelismConsistent": "parallelism",
    "processGroupsMatch": "process groups",
}


def _complete(inspection: schemas.Inspection | None) -> schemas.Inspection | None:
    return inspection if inspection is not None and inspection.status == "complete" else None


def census_line(inspection: schemas.Inspection | None) -> str | None:
    """The traceset's own checks from its recorded census: ``ok (...)``, or ``FAILED``
    with the message of each failed one."""
    census = (done := _complete(inspection)) and done.census
    if not census or not census.checks:
        return None
    held = [
        (words, census.checks[key]) for key, words in _CENSUS_CHECKS.items() if key in census.checks
    ]
    failed = [f"{words}: {check.message}" for words, check in held if check.passed is False]
    if failed:
        return "FAILED: " + "; ".join(failed)
    warned = (
        " with a warning (tracestore validate says why)"
        if any(check.warning for _, check in held)
        else ""
    )
    return f"ok ({', '.join(words for words, _ in held)}){warned}"


def readiness_lines(inspection: schemas.Inspection | None) -> list[str]:
    """``ready for:`` and ``not ready:`` the tools of a traceset's recorded
    ``inspection.readiness``; ``validate`` gives each one's message."""
    from tracestore.inspect.readiness import READINESS_TOOLS

    recorded = (done := _complete(inspection)) and done.readiness
    if not recorded:
        return []
    held = [(tool, recorded[key]) for key, tool in READINESS_TOOLS.items() if key in recorded]
    ready = [tool for tool, check in held if check.passed]
    not_ready = [tool for tool, check in held if not check.passed]
    lines = [f"ready for:   {', '.join(ready)}"] if ready else []
    if not_ready:
        lines.append(f"not ready:   {', '.join(not_ready)} (tracestore validate says why)")
    return lines


def validate_text(traceset_id: str, answer: schemas.ValidateAnswer) -> list[str]:
    """``tracestore validate``: the traceset's checks and its verdict, then, apart, which
    tools can read it (which does not make it invalid)."""
    lines = []
    for check in answer.checks:
        mark = (
            "warn" if check.warning else {True: "ok  ", False: "FAIL", None: "--  "}[check.passed]
        )
        lines.append(f"{mark}  {check.name}" + (f": {check.message}" if check.message else ""))
    lines.append(f"{traceset_id} is {'valid' if answer.valid else 'NOT valid'}")
    if answer.readiness:
        lines.append("Which tools can read it (this does not make it invalid):")
    for entry in answer.readiness:
        state = {True: "ready for", False: "not ready for", None: "not evaluated yet:"}
        told = f": {entry.message}" if entry.message else ""
        lines.append(f"  {state[entry.ready]} {entry.tool}{told}")
    return [shown(line) for line in lines]


def _expires_text(ts: schemas.Traceset) -> str:
    if ts.expires_at is None:
        return "never (promoted)"
    return (
        f"{timestamp(ts.expires_at)} ({ts.ttl_days} days after its last use; "
        f"tracestore promote {shown(ts.id)} keeps it)"
    )


def user_text(user: schemas.UserRef | None) -> str:
    """A user as ``show`` names them: their name and, for ``ls --uploaded-by``, their id."""
    return "-" if user is None else f"{shown(user.name)} ({shown(user.id)})"


def traceset_text(ts: schemas.Traceset) -> str:
    """``tracestore show``: the traceset's members, then its files."""
    ranks = "-" if ts.rank_count_derived is None else str(ts.rank_count_derived)
    lines = [
        f"id:          {shown(ts.id)}",
        f"name:        {shown(ts.name)}",
        f"status:      {shown(ts.status)}",
        f"scope:       {shown(ts.scope)}",
        f"workspace:   {shown(ts.workspace_id)}",
        f"ranks:       {ranks}",
        f"size:        {size_text(ts.total_size)} in {ts.file_count} files",
        f"hash:        {shown(ts.hash or '-')}",
        f"created:     {timestamp(ts.created_at)}",
        f"uploaded by: {user_text(ts.created_by)}",
    ]
    if ts.edited_by is not None:
        lines.append(f"edited:      {timestamp(ts.edited_at)} by {user_text(ts.edited_by)}")
    lines += [f"expires:     {_expires_text(ts)}"]
    if ts.description:
        lines.append(f"description: {shown(ts.description)}")
    if ts.tags:
        lines.append(f"tags:        {', '.join(shown(tag) for tag in ts.tags)}")
    if ts.workload_metadata is not None:
        lines.append(f"metadata:    {shown(jsontext.dumps(ts.workload_metadata))}")
    if census := census_line(ts.inspection):
        lines.append(f"census:      {shown(census)}")
    lines += readiness_lines(ts.inspection)
    rows = [
        [
            f.name,
            f.role,
            size_text(f.size),
            f"{f.rank_range.start}-{f.rank_range.end}" if f.rank_range else "-",
            f.metadata_status,
            (f.hash or "-")[:19],
        ]
        for f in ts.files
    ]
    lines += ["", table(["FILE", "ROLE", "SIZE", "RANKS", "INSPECTION", "HASH"], rows)]
    return "\n".join(lines)


@dataclass
class Reporter:
    """Where a transfer reports: ``progress`` for the bars (None when there are none) and
    ``note`` for a line of text that must not break the bars."""

    progress: ProgressCallback | None = None
    note: Callable[[str], None] = field(default=lambda text: echo_shown(text, err=True))


def waiting_notice(every: float = 5.0) -> Callable[[RetryWait], None]:
    """What a command says while its requests wait to be retried (a service restarting):
    one line on stderr, at most every ``every`` seconds, however many transfers wait."""
    lock = threading.Lock()
    last = -every

    def notice(wait: RetryWait) -> None:
        nonlocal last
        if not wait.reached:  # a few quiet seconds, then the error says what to check
            return
        with lock:
            now = time.monotonic()
            if now - last < every:
                return
            last = now
        click.echo(
            f"Waiting for the service ({shown(wait.reason.message)}); try {wait.attempt} "
            f"in {wait.delay:.1f} s",
            err=True,
        )

    return notice


@contextmanager
def progress_bars() -> Iterator[Reporter]:
    """Rich progress bars on stderr (one per phase) when it is a terminal, else nothing."""
    if not sys.stderr.isatty():
        yield Reporter()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    labels = {
        "upload": "uploading",
        "complete": "verifying",  # the service hashes and stores what it received
        "download": "downloading",
    }
    tasks: dict[str, TaskID] = {}
    with Progress(
        TextColumn("{task.description:<12}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bars:
        lock = threading.Lock()

        def update(event: ProgressEvent) -> None:
            with lock:  # events come from the transfer threads
                task = tasks.get(event.phase)
                if event.phase == "complete":
                    if task is None:  # no byte count while the service works: a pulse
                        tasks[event.phase] = bars.add_task(labels[event.phase], total=None)
                    else:
                        bars.update(task, total=event.total, completed=event.total)
                    return
                if task is None:
                    # A resumed upload starts with what the service holds: not speed.
                    done = event.advance if not event.file else 0
                    task = bars.add_task(labels[event.phase], total=event.total, completed=done)
                    tasks[event.phase] = task
                    if done:
                        return
            bars.update(task, advance=event.advance)

        def note(text: str) -> None:
            # No markup: a name holding [bold] prints as written.
            bars.console.print(shown(text), markup=False, highlight=False, soft_wrap=True)

        yield Reporter(update, note)
