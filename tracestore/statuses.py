"""A traceset's status: the reference API's six values, in one place for the wire models
(``schemas.Status``), the list filter, the command line's ``ls --status`` and the web page
(its shell carries them). Standard library only: the command line reads them at start.

tracestore never sets ``processing`` or ``metadata_failed`` (inspection runs after a
traceset is ready and never fails it): the filter takes them and they match nothing."""

from __future__ import annotations

from typing import Literal, get_args

Status = Literal["uploading", "processing", "ready", "upload_failed", "metadata_failed", "deleted"]
STATUSES: tuple[Status, ...] = get_args(Status)
