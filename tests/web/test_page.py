"""The page's shell: served at /, its modules from /static, sign-in with an API token."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from tests.support.envelopes import assert_error
from tests.support.served import Served
from tracestore.server.settings import Settings
from tracestore.server.web import STATIC_DIR, blocked_part_origin, page_headers


def test_the_shell_is_served_with_a_strict_content_security_policy(served: Served) -> None:
    answer = httpx.get(served.url + "/")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in answer.headers["content-security-policy"]
    assert httpx.get(served.url + "/static/app.js").status_code == 200
    assert httpx.get(served.url + "/static/nothing.js").status_code == 404


def test_a_wrong_token_is_refused_with_the_apis_message_and_a_right_one_signs_in(
    served: Served, page: Page
) -> None:
    page.goto(served.url + "/")
    page.get_by_label("API token").fill("tsk_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).not_to_be_empty()
    page.get_by_label("API token").fill(served.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_label("API token")).to_have_count(0)
    assert page.evaluate("sessionStorage.getItem('tracestore.token')") == served.token


def test_the_shell_is_served_at_each_page_url_and_api_paths_keep_their_json_404(
    served: Served,
) -> None:
    for path in [
        "/tracesets/ts_anything",
        "/upload",
        "/compare?base=a&other=b",
        "/?workload_family=llm",
    ]:
        answer = httpx.get(served.url + path)
        assert answer.status_code == 200, path
        assert answer.headers["content-type"].startswith("text/html")
        assert "connect-src 'self'" in answer.headers["content-security-policy"]
    for path in ["/api/v1/nothing", "/nothing", "/tracesets/a/b"]:
        answer = httpx.get(served.url + path)
        assert assert_error(answer, 404, "NOT_FOUND")["message"] == f"No route GET {path}"
    paths = httpx.get(served.url + "/openapi.json").json()["paths"]
    assert not {"/", "/upload", "/compare", "/tracesets/{traceset_id}"} & set(paths)


def test_the_csp_lets_the_page_reach_the_configured_origins_and_no_other() -> None:
    plain = page_headers(Settings(), None)["Content-Security-Policy"]
    assert "connect-src 'self';" in plain
    s3 = Settings(web_connect_origins=["https://s3.lan:9000"])
    policy = page_headers(s3, None)["Content-Security-Policy"]
    assert "connect-src 'self' https://s3.lan:9000;" in policy


def test_the_csp_lets_the_page_reach_the_bucket_unless_the_setting_says_otherwise() -> None:
    """Issue 43, item 1: by default the page may PUT parts where the store's part URLs point
    (an S3 bucket's origin); TRACESTORE_WEB_CONNECT_ORIGINS, when set, is the whole list, and
    serve's start-up warning names what to set when it leaves the bucket out."""
    bucket = "http://127.0.0.1:9000"
    policy = page_headers(Settings(), bucket)["Content-Security-Policy"]
    assert f"connect-src 'self' {bucket};" in policy
    assert blocked_part_origin(Settings(), bucket) is None
    assert blocked_part_origin(Settings(), None) is None
    chosen = Settings(web_connect_origins=["https://s3.lan:9000"])
    policy = page_headers(chosen, bucket)["Content-Security-Policy"]
    assert "connect-src 'self' https://s3.lan:9000;" in policy
    warning = blocked_part_origin(chosen, bucket)
    assert warning is not None and warning.startswith("Warning:")
    assert f"TRACESTORE_WEB_CONNECT_ORIGINS=https://s3.lan:9000,{bucket}" in warning
    assert "CORS" in warning
    both = Settings(web_connect_origins=["https://s3.lan:9000", bucket])
    assert blocked_part_origin(both, bucket) is None


def test_every_module_of_the_page_loads_in_the_browser(served: Served, page: Page) -> None:
    """Each file under static/ imports without a syntax or link error (a broken module
    otherwise shows only as a view that never renders)."""
    modules = sorted(p.name for p in STATIC_DIR.glob("*.js"))
    assert "app.js" in modules
    page.goto(served.url + "/")  # app.js runs here; the others import as the views would
    failures = page.evaluate(
        """async (names) => {
          const failed = [];
          for (const name of names) {
            try { await import('/static/' + name); }
            catch (error) { failed.push(name + ': ' + error); }
          }
          return failed;
        }""",
        modules,
    )
    assert failures == []


def test_every_page_url_answers_head_as_it_answers_get(served: Served) -> None:
    # Link checkers, uptime probes and proxies ask HEAD; a 405 reads as "the page is down".
    for path in ["/", "/tracesets/ts_anything", "/upload", "/compare", "/static/app.js"]:
        got = httpx.get(served.url + path)
        head = httpx.head(served.url + path)
        assert head.status_code == 200, path
        assert head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"], path
        assert head.headers.get("content-security-policy") == got.headers.get(
            "content-security-policy"
        )


def test_the_static_modules_are_not_sniffed_and_are_revalidated_after_an_upgrade(
    served: Served,
) -> None:
    # The modules' URLs carry no version: a browser must ask again (a 304 when unchanged)
    # rather than run last release's app.js beside this release's api.js.
    for path in ["/static/app.js", "/static/style.css", "/static/favicon.svg"]:
        answer = httpx.get(served.url + path)
        assert answer.status_code == 200, path
        assert answer.headers["x-content-type-options"] == "nosniff", path
        assert answer.headers["cache-control"] == "no-cache", path
        again = httpx.get(served.url + path, headers={"If-None-Match": answer.headers["etag"]})
        assert again.status_code == 304, path
        assert again.headers["cache-control"] == "no-cache", path
    missing = httpx.get(served.url + "/static/nothing.js")
    assert assert_error(missing, 404, "NOT_FOUND")["message"] == "No route GET /static/nothing.js"


def test_the_login_callback_is_a_page_only_when_a_login_is_configured(served: Served) -> None:
    answer = httpx.get(served.url + "/signin/callback?code=x&state=y")
    assert assert_error(answer, 404, "NOT_FOUND")["message"] == "No route GET /signin/callback"
