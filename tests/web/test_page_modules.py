"""The page's own JavaScript against Python, in the browser: sha256.js (for pages without
``crypto.subtle``) hashes as hashlib, and the upload form writes the metadata's JSON text as
typed (its numbers' spelling kept), which the service reads as tracestore.jsontext does. The
form's verdict is the service's own (upload-url's dry run): tests/web/test_upload.py."""

from __future__ import annotations

import hashlib
import json
import random

from playwright.sync_api import Page

from tests.support.served import Served


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


def test_the_form_writes_the_metadata_as_typed(served: Served, page: Page) -> None:
    page.goto(served.url + "/")
    built = page.evaluate(
        """async () => {
          const m = await import('/static/upload_view.js');
          return [
            m.formMetadataText(
              { rankCount: '16', dp: '4', tp: ' 4 ', workload_family: 'llama', cp: '' }),
            m.formMetadataText({ rankCount: '2.0', dp: 'four', pp: '12345678901234567891' }),
            m.formMetadataText({ precision: ' "bf16" ', tp: '1e3', sp: '-0', ep: '01' }),
            m.formMetadataText({ rankCount: '  ' }),
          ];
        }"""
    )
    assert built[0] == (
        '{"workload_family":"llama","shape":{"rankCount":16},"parallelism":{"dp":4,"tp":4}}'
    )
    assert built[1] == (
        '{"shape":{"rankCount":2.0},"parallelism":{"dp":"four","pp":12345678901234567891}}'
    )
    assert built[2] == ('{"precision":"\\"bf16\\"","parallelism":{"tp":1e3,"sp":-0,"ep":"01"}}')
    assert built[3] is None
    for text in built[:3]:
        json.loads(text)  # JSON, whatever was typed
