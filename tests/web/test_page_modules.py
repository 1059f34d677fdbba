"""The page's own JavaScript against the service's Python, in the browser (issue 20):
metadata_rules.js gives the verdict and the very message of ``tracestore.metadata`` on the
seed page's examples and on generated metadata, the upload form builds metadata those rules
read as the API does, and sha256.js (for pages without ``crypto.subtle``) hashes as hashlib."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from playwright.sync_api import Page

from tests.test_e2e_serve import Served
from tracestore import jsontext
from tracestore import metadata as rules
from tracestore.errors import ValidationError


def test_the_pages_sha256_matches_hashlib(served: Served, page: Page) -> None:
    page.goto(served.url + "/")
    rng = random.Random(20)
    cases = [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4096, 100_003]
    for size in cases:
        data = rng.randbytes(size)
        cut = sorted(rng.sample(range(size + 1), min(size + 1, 4)))
        digest = page.evaluate(
            """async ([hex, cuts]) => {
              const { Sha256 } = await import('/static/sha256.js');
              const bytes = new Uint8Array(hex.match(/../g)?.map((h) => parseInt(h, 16)) ?? []);
              const sha = new Sha256();
              let at = 0;
              for (const c of [...cuts, bytes.length]) {
                sha.update(bytes.subarray(at, c));
                at = c;
              }
              return sha.hexDigest();
            }""",
            [data.hex(), cut],
        )
        assert digest == hashlib.sha256(data).hexdigest(), size


def python_verdict(text: str, has_primary: bool) -> dict[str, Any]:
    try:
        rank_count = rules.check_upload_metadata(
            jsontext.loads(text), has_primary_files=has_primary
        )
    except ValidationError as exc:
        return {"ok": False, "message": exc.message}
    return {"ok": True, "rankCount": rank_count}


JS_VERDICTS = """async (cases) => {
  const m = await import('/static/metadata_rules.js');
  return cases.map(([text, hasPrimary]) => {
    try {
      const value = m.parseJson(text);
      return { ok: true, rankCount: m.checkUploadMetadata(value, { hasPrimaryFiles: hasPrimary }) };
    } catch (error) {
      if (!(error instanceof m.RuleError)) return { ok: false, message: 'not a rule: ' + error };
      return { ok: false, message: error.message };
    }
  });
}"""

SEED_EXAMPLES = [
    '{"parallelism": {"dp": 32, "tp": 8, "pp": 1}, "shape": {"rankCount": 256}}',
    '{"shape": {"rankCount": 256}}',
    '{"parallelism": {"dp": 4, "tp": 2}}',
    "null",
    "{}",
    '{"shape": {"rankCount": 0}}',
    '{"shape": {"rankCount": -1}}',
    '{"shape": {"rankCount": 2.0}}',
    '{"shape": {"rankCount": "4"}}',
    '{"parallelism": {"dp": 0}}',
    '{"parallelism": {"tp": 2.0}}',
    '{"parallelism": {"ep": "4"}}',
    '{"parallelism": {"dp": true}}',
    '{"shape": {"rankCount": 8}, "parallelism": {"dp": 2, "tp": 2}}',
    '{"shape": {"rankCount": 2147483648}}',
    '{"shape": {"rankCount": 2147483647}}',
    '{"parallelism": {"dp": 65536, "tp": 65536}}',
    '{"shape": null, "parallelism": null}',
    '{"shape": {"rankCount": null}, "parallelism": {"dp": null, "tp": 4}}',
    '{"parallelism": {"cp": 2, "fsdp": 4}}',
    '{"shape": {"rank_count": 8}}',
    '{"shape": [1], "parallelism": {}}',
    '{"parallelism": "dp=4"}',
    "[]",
    '"text"',
    "7",
    '{"shape": {"rankCount": 1e3}}',
    '{"shape": {"rankCount": 4}, "shape": {"rankCount": 8}}',
    '{"parallelism": {"dp": ' + "9" * 100 + "}}",
    '{"parallelism": {"dp": '
    + "9" * 4000
    + ', "tp": '
    + "9" * 4000
    + ', "sp": '
    + "9" * 4000
    + "}}",
    '{"shape": {"rankCount": 1}, "note": "' + "é" * 40_000 + '"}',
    '{"shape": {"rankCount": 1}, "note": "' + "x" * 65_510 + '"}',
    '{"shape": {"rankCount": 1}, "n": ['
    + ",".join(["1e400", "1e-7", "1.5", "-0.0", "1e16"] * 4000)
    + "]}",
    '{"shape": {"rankCount": 1}, "s": "\\ud800"}',
    '{"shape": {"rankCount": 1}, "s": "\\udc00\\ud800x"}',
    '{"a": [1, {"\\ud801": 2}], "b": "\\ud800"}',
    '{"shape": {"rankCount": 1}, "p": {"x": "ok", "\\udfff": "\\ud800"}}',
    '{"shape": {"rankCount": 1}, "p": {"\\ud83d\\ude00": "\\ud83d\\ude00 pair"}}',
    '{"shape": {"rankCount": 1}, "\\ud800": 1, "\\ud800": 2}',
    '{"shape": {"rankCount": "' + "long" * 40 + '"}}',
    '{"shape": {"rankCount": "\\u00e9\\n\\u0001\\""}}',
    '{"parallelism": {"dp": [1, {"b": 2, "1": 3}]}}',
]

_NUMBERS = st.sampled_from(
    [
        *("1", "2", "4", "8", "0", "-1", "-0", "2.0", "1e3", "1E+2", "0.5", "3", "16"),
        *("2147483647", "2147483648", "65536", "1" + "0" * 30, "1e400", "-1e400", "1.5e-7"),
    ]
)
_SCALARS = st.one_of(
    _NUMBERS,
    st.sampled_from(["null", "true", "false", '"4"', '""', '"dp"']),
    st.text(max_size=6).map(lambda s: json.dumps(s, ensure_ascii=bool(len(s) % 2))),
)


def _object(members: dict[str, str]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in members.items()) + "}"


_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: "[" + ",".join(items) + "]"),
        st.dictionaries(st.sampled_from(["a", "b", "2", "1"]), inner, max_size=3).map(_object),
    ),
    max_leaves=6,
)
_DEGREE_KEYS = st.sampled_from([*rules.DEGREES, "cp", "fsdp", "rankCount", "x"])
_PARALLELISM = st.one_of(
    st.dictionaries(_DEGREE_KEYS, st.one_of(_NUMBERS, _SCALARS), max_size=6).map(_object),
    _VALUES,
)
_SHAPE = st.one_of(
    st.dictionaries(
        st.sampled_from(["rankCount", "rank_count", "global_batch_size"]), _SCALARS, max_size=3
    ).map(_object),
    _VALUES,
)
# Mostly well-formed declarations, so that products, mismatches and limits come up often.
_GOOD = st.sampled_from(["1", "2", "3", "4", "8", "16", "64", "1024", "65536"])
_DEGREE = st.one_of(_GOOD, _GOOD, _GOOD, _NUMBERS, _SCALARS)
_PLAUSIBLE = st.builds(
    lambda rank_count, degrees, extra: _object(
        {
            **({"shape": _object({"rankCount": rank_count})} if rank_count else {}),
            **({"parallelism": _object(degrees)} if degrees is not None else {}),
            **extra,
        }
    ),
    st.one_of(st.none(), _GOOD, _GOOD, _NUMBERS),
    st.one_of(st.none(), st.dictionaries(_DEGREE_KEYS, _DEGREE, max_size=5)),
    st.dictionaries(st.sampled_from(["workload_family", "note"]), _VALUES, max_size=1),
)
_METADATA = st.one_of(
    _PLAUSIBLE,
    _PLAUSIBLE,
    st.dictionaries(
        st.sampled_from(["shape", "parallelism", "workload_family", "precision"]),
        st.one_of(_SHAPE, _PARALLELISM, _VALUES),
        max_size=4,
    ).map(_object),
    st.builds(
        lambda shape, parallelism: _object({"shape": shape, "parallelism": parallelism}),
        _SHAPE,
        _PARALLELISM,
    ),
    _VALUES,
)


def test_the_pages_rules_give_the_services_verdict_and_message_on_the_seeds_examples(
    served: Served, page: Page
) -> None:
    page.goto(served.url + "/")
    cases = [(text, primary) for text in SEED_EXAMPLES for primary in (True, False)]
    got = page.evaluate(JS_VERDICTS, [list(c) for c in cases])
    for (text, primary), verdict in zip(cases, got, strict=True):
        assert verdict == python_verdict(text, primary), text[:200]


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cases=st.lists(st.tuples(_METADATA, st.booleans()), min_size=1, max_size=20))
def test_the_pages_rules_give_the_services_verdict_and_message_on_generated_metadata(
    served: Served, page: Page, cases: list[tuple[str, bool]]
) -> None:
    if page.url == "about:blank":
        page.goto(served.url + "/")
    got = page.evaluate(JS_VERDICTS, [list(c) for c in cases])
    for (text, primary), verdict in zip(cases, got, strict=True):
        assert verdict == python_verdict(text, primary), text


def test_the_form_builds_metadata_the_rules_read_like_the_api(served: Served, page: Page) -> None:
    page.goto(served.url + "/")
    built = page.evaluate(
        """async () => {
          const m = await import('/static/metadata_rules.js');
          const text = (fields) => m.writeJson(m.metadataFromFields(fields));
          return [
            text({ rankCount: '16', dp: '4', tp: ' 4 ', workload_family: 'llama', cp: '' }),
            text({ rankCount: '2.5', dp: 'four' }),
            text({}),
          ];
        }"""
    )
    assert built[0] == (
        '{"workload_family":"llama","shape":{"rankCount":16},"parallelism":{"dp":4,"tp":4}}'
    )
    assert built[1] == '{"shape":{"rankCount":2.5},"parallelism":{"dp":"four"}}'
    assert built[2] == "null"
    assert python_verdict(built[1], True)["message"] == (
        "workloadMetadata.shape.rankCount must be a whole number of at least 1, got 2.5"
    )
