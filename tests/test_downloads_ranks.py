"""Rank-addressable downloads: ``GET .../download?ranks=0-7,12`` and ``--ranks``."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tests.support.envelopes import assert_error
from tests.support.paths import TESTDATA
from tests.support.uploading import upload
from tracestore.cli import main
from tracestore.errors import ValidationError
from tracestore.ranks import parse_ranks, ranks_text, within
from tracestore.server.services import Services

DLRM = sorted((TESTDATA / "kineto-dlrm-8ranks").iterdir())
NOTES = b"how these traces were made\n"


def _dlrm(http: TestClient, **extra: Any) -> dict[str, Any]:
    files = {p.name: (p.read_bytes(), "primary") for p in DLRM}
    files.update(extra.pop("more", {}))
    files["notes.txt"] = (NOTES, "supporting")
    return upload(http, files, {"shape": {"rankCount": 8}}, **extra)


def _api(traceset_id: str) -> str:
    return f"/api/v1/tracesets/{traceset_id}/download"


def _zip(http: TestClient, url: str) -> zipfile.ZipFile:
    response = http.get(url, headers={"Authorization": ""})
    assert response.status_code == 200, response.text
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    assert archive.testzip() is None
    return archive


def test_ranks_archive_holds_just_those_files_and_a_manifest(http: TestClient) -> None:
    ts = _dlrm(http)
    answer = http.get(_api(ts["id"]), params={"ranks": "5, 0-2,1"}).json()
    assert answer["ranks"] == "0-2,5" and answer["file"] is None
    assert answer["wholeFiles"] == []  # one rank per file: nothing more than asked for
    archive = _zip(http, answer["url"])
    worker = {int(p.name[6]): p for p in DLRM}
    assert archive.namelist() == [
        *(worker[r].name for r in (0, 1, 2, 5)),
        "_tracestore/manifest.json",
    ]
    for rank in (0, 1, 2, 5):
        assert archive.read(worker[rank].name) == worker[rank].read_bytes()
    manifest = json.loads(archive.read("_tracestore/manifest.json"))
    assert manifest["ranks"] == "0-2,5"
    assert [f["selected"] for f in manifest["files"]] == ["0", "1", "2", "5"]
    entry = manifest["files"][3]
    data = worker[5].read_bytes()
    assert entry == {
        "name": worker[5].name,
        "role": "primary",
        "ranks": {"start": 5, "end": 5},
        "selected": "5",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "format": "kineto_json",
    }


def test_supporting_files_come_on_request(http: TestClient) -> None:
    ts = _dlrm(http)
    plain = _zip(http, http.get(_api(ts["id"]), params={"ranks": "3"}).json()["url"])
    assert "notes.txt" not in plain.namelist()
    answer = http.get(_api(ts["id"]), params={"ranks": "3", "supporting": "true"}).json()
    archive = _zip(http, answer["url"])
    assert archive.read("notes.txt") == NOTES
    assert [f["name"] for f in json.loads(archive.read("_tracestore/manifest.json"))["files"]][
        -1
    ] == "notes.txt"


def test_the_manifest_never_replaces_a_traceset_file(http: TestClient) -> None:
    ts = _dlrm(http, more={"_tracestore/manifest.json": (b"mine", "supporting")})
    answer = http.get(_api(ts["id"]), params={"ranks": "0", "supporting": "true"}).json()
    archive = _zip(http, answer["url"])
    assert archive.read("_tracestore/manifest.json") == b"mine"
    assert json.loads(archive.read("_tracestore_/manifest.json"))["ranks"] == "0"


@pytest.mark.parametrize(
    "mine", ["_TRACESTORE/manifest.json", "_Tracestore/notes.txt", "_tracestorE"]
)
def test_the_manifest_never_replaces_a_file_on_a_case_insensitive_file_system(
    http: TestClient, mine: str
) -> None:
    """macOS and Windows compare names without case (and normalised): unzipped there, a
    supporting _TRACESTORE/manifest.json and the service's _tracestore/manifest.json were
    one file, the later replacing the earlier."""
    ts = _dlrm(http, more={mine: (b"mine", "supporting")})
    answer = http.get(_api(ts["id"]), params={"ranks": "0", "supporting": "true"}).json()
    names = _zip(http, answer["url"]).namelist()
    assert mine in names and "_tracestore_/manifest.json" in names
    assert len({name.casefold() for name in names}) == len(names)


def _wide_archive(last_rank: int) -> bytes:
    """A tar of two Kineto traces, ranks 0 and ``last_rank``: one file whose recorded ranks
    span ``0..last_rank``."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for rank in (0, last_rank):
            trace = {"distributedInfo": {"rank": rank, "world_size": last_rank + 1}}
            data = json.dumps({**trace, "traceEvents": []}).encode()
            member = tarfile.TarInfo(f"rank_{rank}.json")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.timeout(120)
def test_a_ranks_archive_grows_with_the_files_not_with_the_ranks(
    http: TestClient, services: Services
) -> None:
    """The manifest wrote a key per rank before the first byte: rankCount 3·10⁶ and
    ?ranks=0-2999999 were +1.2 GiB, 12.8 s and a 128 MB manifest, for the URL's life. Here
    3·10⁵ ranks (inspecting a larger declaration is another test's subject)."""
    count = 300_000
    ts = upload(
        http, {"ranks.tar": (_wide_archive(count - 1), "primary")}, {"shape": {"rankCount": count}}
    )
    services.wait_for_background()
    assert http.get(f"/api/v1/tracesets/{ts['id']}").json()["files"][0]["rankRange"] == {
        "start": 0,
        "end": count - 1,
    }
    tracemalloc.start()
    try:
        answer = http.get(_api(ts["id"]), params={"ranks": f"0-{count - 1},{count // 2}"}).json()
        archive = _zip(http, answer["url"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    text = archive.read("_tracestore/manifest.json")
    assert json.loads(text)["files"][0]["selected"] == f"0-{count - 1}"
    assert len(text) < 1024, len(text)
    assert peak < 8 * 1024 * 1024, peak


def test_ranks_within_a_span_are_found_by_bisection() -> None:
    runs = parse_ranks("0-3,10,20-29,2147483000-2147483646")
    assert within(runs, 2, 25) == ((2, 3), (10, 10), (20, 25))
    assert within(runs, 4, 9) == ()
    assert within(runs, 0, 2147483646) == runs
    assert within(runs, 29, 29) == ((29, 29),)
    assert within((), 0, 5) == ()


BAD = [
    ({"ranks": "8"}, "Unknown rank 8 for traceset '{id}': its files hold ranks 0-7"),
    ({"ranks": "6-9"}, "Unknown ranks 8, 9 for traceset '{id}': its files hold ranks 0-7"),
    ({"ranks": "a-b"}, "ranks: 'a-b' is not a rank or a range such as 0-7 (in 'a-b')"),
    ({"ranks": "0-7,"}, "ranks: '' is not a rank or a range such as 0-7 (in '0-7,')"),
    ({"ranks": "5-3"}, "ranks: the range '5-3' ends before it starts"),
    ({"ranks": "-1"}, "ranks: '-1' is not a rank or a range such as 0-7 (in '-1')"),
    ({"ranks": ""}, "ranks must list ranks and ranges such as 0-7,12 (at most 1024); got ''"),
    ({"ranks": "1", "file": "notes.txt"}, "Give file or ranks, not both"),
    ({"supporting": "true"}, "supporting applies to a download of ranks; give ranks too"),
]


@pytest.mark.parametrize(("params", "message"), BAD, ids=lambda v: str(v)[:30])
def test_a_bad_or_unknown_rank_is_a_400_naming_it(
    http: TestClient, params: dict[str, str], message: str
) -> None:
    ts = _dlrm(http)
    response = http.get(_api(ts["id"]), params=params)
    assert assert_error(response, 400, "VALIDATION_ERROR")["message"] == message.format(id=ts["id"])


def test_a_changed_selection_breaks_the_signature(http: TestClient) -> None:
    ts = _dlrm(http)
    url = http.get(_api(ts["id"]), params={"ranks": "0"}).json()["url"]
    parsed = urlparse(url)
    query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
    assert query["select"] == "0"
    for select in ("0-7", "0+supporting", ""):
        forged = f"{parsed.path}?{urlencode({**query, 'select': select})}"
        assert http.get(forged, headers={"Authorization": ""}).status_code == 403, select


def test_rank_lists_parse_merge_and_print() -> None:
    assert parse_ranks("12, 0-7 ,3,8") == ((0, 8), (12, 12))
    assert ranks_text(parse_ranks("0-0")) == "0"
    with pytest.raises(ValidationError, match="beyond the largest rank count"):
        parse_ranks("0-9999999999")


def test_a_traceset_of_one_archive_says_it_sends_it_whole(
    http: TestClient, tmp_path: Path, admin_token: str
) -> None:
    """``--ranks 1`` of a traceset that is one archive sent the whole archive without a word
    (issue 43, item 11): the answer and the command say so."""
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as archive:
        for path in DLRM:
            archive.write(path, path.name)
    ts = upload(http, {"traces.zip": (packed.getvalue(), "primary")}, {"shape": {"rankCount": 8}})
    answer = http.get(_api(ts["id"]), params={"ranks": "1"}).json()
    assert answer["wholeFiles"] == [{"name": "traces.zip", "ranks": "0-7"}]

    result = CliRunner().invoke(
        main,
        [
            *("download", ts["id"], "--ranks", "1", "-o", str(tmp_path)),
            *("--url", "http://testserver", "--token", admin_token),
        ],
        obj={"http": http},
    )
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        "Note: traces.zip holds ranks 0-7 and comes whole: a file is not split by rank"
    )
    assert (tmp_path / "traces.zip").read_bytes() == packed.getvalue()
