"""The values a traceset's status and scope take, in one place for the wire models
(``schemas.Status``, ``schemas.Scope``), the list filters, the command line's ``ls
--status``/``--scope`` and the web page (its shell carries them). Standard library only:
the command line reads them at start.

The statuses are the reference API's six: tracestore never sets ``processing`` or
``metadata_failed`` (inspection runs after a traceset is ready and never fails it), so the
filter takes them and they match nothing. The scopes go from the narrowest to the widest.
A ready traceset's census verdict (``inspect.census.census_verdict``) is ``pass`` or
``fail`` once inspection has recorded it, ``unknown`` before (or when it could not run)."""

from __future__ import annotations

from typing import Literal, get_args

Status = Literal["uploading", "processing", "ready", "upload_failed", "metadata_failed", "deleted"]
STATUSES: tuple[Status, ...] = get_args(Status)
Scope = Literal["workspace", "tenant", "public"]
SCOPES: tuple[Scope, ...] = get_args(Scope)
CensusVerdict = Literal["pass", "fail", "unknown"]
CENSUS_VERDICTS: tuple[CensusVerdict, ...] = get_args(CensusVerdict)
