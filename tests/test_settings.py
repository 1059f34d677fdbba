"""Settings that forgive: sizes and durations in the forms people write, unknown names
warned about with the nearest valid one, a bad value refused in one line."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path

import pytest

from tracestore.server.settings import MIB, Settings, SettingsError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TRACESTORE_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("text", "size"),
    [("67108864", 64 * MIB), ("64MiB", 64 * MIB), ("64 mib", 64 * MIB), ("64MB", 64_000_000)],
)
def test_sizes_in_bytes_or_with_a_unit(
    monkeypatch: pytest.MonkeyPatch, text: str, size: int
) -> None:
    monkeypatch.setenv("TRACESTORE_PART_SIZE", text)
    assert Settings.load().part_size == size


@pytest.mark.parametrize(
    ("text", "duration"),
    [("60", timedelta(minutes=1)), ("PT1M", timedelta(minutes=1)), ("P1D", timedelta(days=1))],
)
def test_durations_in_seconds_or_iso_8601(
    monkeypatch: pytest.MonkeyPatch, text: str, duration: timedelta
) -> None:
    monkeypatch.setenv("TRACESTORE_PURGE_GRACE", text)
    assert Settings.load().purge_grace == duration


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        (
            "TRACESTORE_PART_SIZE",
            "64XB",
            "TRACESTORE_PART_SIZE=64XB: expected bytes (67108864) or a size with a unit "
            "(64MiB, 64MB, 1GiB)",
        ),
        (
            "TRACESTORE_PURGE_GRACE",
            "1h",
            "TRACESTORE_PURGE_GRACE=1h: expected seconds (60) or ISO 8601 (PT1M, P1D)",
        ),
        (
            "TRACESTORE_SESSION_TTL",
            "0",
            "TRACESTORE_SESSION_TTL=0: expected a positive duration: seconds (60) or "
            "ISO 8601 (PT1M, P1D)",
        ),
        (
            "TRACESTORE_PART_SIZE",
            "1MiB",
            "TRACESTORE_PART_SIZE=1MiB: Input should be greater than or equal to 5242880",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_setting_value_and_form(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, line: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as refused:
        Settings.load()
    assert str(refused.value) == line


def test_lists_are_comma_separated_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACESTORE_JWT_ALGORITHMS", "RS256, ES384")
    monkeypatch.setenv("TRACESTORE_TRUSTED_PROXIES", '["10.0.0.0/8", "127.0.0.1"]')
    settings = Settings.load()
    assert settings.jwt_algorithms == ["RS256", "ES384"]
    assert [str(n) for n in settings.trusted_proxies] == ["10.0.0.0/8", "127.0.0.1/32"]


def test_unknown_variables_are_warned_about_with_the_nearest_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACESTORE_SESION_TTL", "5")
    monkeypatch.setenv("TRACESTORE_URL", "http://x")  # the client's: not unknown
    assert Settings.load().warnings == [
        "TRACESTORE_SESION_TTL is not a tracestore setting and is ignored; "
        "did you mean TRACESTORE_SESSION_TTL?"
    ]


def test_toml_keys_as_fields_or_variables_and_unknown_ones_warned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "tracestore.toml"
    config.write_text(
        'TRACESTORE_SESSION_TTL = 3\npart_size = "64MiB"\nsesion_ttl = 9\n'
        'TRACESTORE_PURGE_GRAC = "PT1M"\n'
    )
    monkeypatch.setenv("TRACESTORE_CONFIG", str(config))
    settings = Settings.load()
    assert (settings.session_ttl, settings.part_size) == (timedelta(seconds=3), 64 * MIB)
    assert settings.warnings == [
        f"{config}: key 'sesion_ttl' is not a tracestore setting and is ignored; "
        "did you mean session_ttl?",
        f"{config}: key 'TRACESTORE_PURGE_GRAC' is not a tracestore setting and is ignored; "
        "did you mean TRACESTORE_PURGE_GRACE?",
    ]
    # The environment wins over the file; a bad file value names the file.
    monkeypatch.setenv("TRACESTORE_SESSION_TTL", "PT2M")
    assert Settings.load().session_ttl == timedelta(minutes=2)
    config.write_text('part_size = "lots"\n')
    with pytest.raises(SettingsError, match=rf"^{config}: part_size = 'lots': expected bytes"):
        Settings.load()
    config.write_text("part_size = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        Settings.load()


LOGIN = {
    "TRACESTORE_OIDC_AUTHORIZATION_URL": "https://login.example.com/authorize",
    "TRACESTORE_OIDC_TOKEN_URL": "https://login.example.com/token",
    "TRACESTORE_OIDC_CLIENT_ID": "tracestore-web",
    "TRACESTORE_JWKS_URL": "https://login.example.com/jwks",
}


@pytest.mark.parametrize(
    ("left_out", "problem"),
    [
        (
            "TRACESTORE_OIDC_CLIENT_ID",
            "TRACESTORE_OIDC_CLIENT_ID=None: the page's OIDC login needs its client id too "
            "(TRACESTORE_OIDC_CLIENT_ID)",
        ),
        (
            "TRACESTORE_OIDC_TOKEN_URL",
            "TRACESTORE_OIDC_CLIENT_ID=tracestore-web: the page's OIDC login needs "
            "TRACESTORE_OIDC_AUTHORIZATION_URL and TRACESTORE_OIDC_TOKEN_URL",
        ),
        (
            "TRACESTORE_JWKS_URL",
            "TRACESTORE_OIDC_CLIENT_ID=tracestore-web: the page's OIDC login gives JWTs the "
            "service must verify: set TRACESTORE_JWKS_URL or TRACESTORE_JWKS_FILE (and the "
            "issuer and audience)",
        ),
    ],
)
def test_the_pages_login_is_all_or_nothing_and_needs_the_keys_to_verify_its_tokens(
    monkeypatch: pytest.MonkeyPatch, left_out: str, problem: str
) -> None:
    for name, value in LOGIN.items():
        if name != left_out:
            monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=f"^{re.escape(problem)}$"):
        Settings.load()


def test_the_pages_extra_origins_are_origins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACESTORE_WEB_CONNECT_ORIGINS", "https://s3.lan:9000, http://minio")
    assert Settings.load().web_connect_origins == ["https://s3.lan:9000", "http://minio"]
    monkeypatch.setenv("TRACESTORE_WEB_CONNECT_ORIGINS", "https://s3.lan/bucket")
    with pytest.raises(SettingsError, match="no path"):
        Settings.load()


# Where 0 means "now": no grace before unreferenced bytes go, no wait for open requests,
# a blob re-hashed at every validate.
ZERO_MEANS_NOW = {"purge_grace", "shutdown_grace", "reverify_interval"}


def _durations() -> list[str]:
    return [n for n, f in Settings.model_fields.items() if f.annotation is timedelta]


def test_the_durations_that_take_zero_are_the_documented_ones() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert set(_durations()) >= ZERO_MEANS_NOW
    for name in _durations():
        row = next(line for line in readme.splitlines() if f"`TRACESTORE_{name.upper()}`" in line)
        assert ("(0:" in row) == (name in ZERO_MEANS_NOW), row


@pytest.mark.parametrize("name", sorted(ZERO_MEANS_NOW))
def test_zero_is_now_for_graces(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(f"TRACESTORE_{name.upper()}", "0")
    assert getattr(Settings.load(), name) == timedelta(0)
    monkeypatch.setenv(f"TRACESTORE_{name.upper()}", "PT0S")
    assert getattr(Settings.load(), name) == timedelta(0)


@pytest.mark.parametrize("name", sorted(set(_durations()) - ZERO_MEANS_NOW))
def test_zero_is_refused_where_a_duration_must_pass(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    variable = f"TRACESTORE_{name.upper()}"
    monkeypatch.setenv(variable, "0")
    with pytest.raises(SettingsError) as refused:
        Settings.load()
    assert str(refused.value) == (
        f"{variable}=0: expected a positive duration: seconds (60) or ISO 8601 (PT1M, P1D)"
    )


def test_a_negative_duration_is_refused_everywhere() -> None:
    for name in _durations():
        with pytest.raises(SettingsError, match=name.upper()):
            Settings.load(**{name: -1})
