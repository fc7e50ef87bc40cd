"""Issue 12's deployment settings: QUESTLOG_HTTPS makes `check --deploy` clean, DEBUG off never runs
on a missing or development secret key (commands and servers alike), and every page and API
answer carries the security headers, with a Content Security Policy that allows no inline script."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.test import Client, override_settings

from config.deploy import DEVELOPMENT_SECRET_KEY, HSTS_SECONDS, bind_addresses, proxy_bypass_problem
from quests.services.tokens import token_create
from quests.web.login import client_address
from tests.conftest import ApiClient
from tests.test_serve import SERVER_SECRET_KEY, Server, gunicorn, serve, servers  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
A_REAL_KEY = "a-real-deployment-key-" + "x7Kq9" * 10
REFUSED_KEYS = {"unset": None, "empty": "", "the development key": DEVELOPMENT_SECRET_KEY}
HTTPS_SETTINGS = (
    "SECURE_PROXY_SSL_HEADER",
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
)


def environment(tmp_path: Path, secret_key: str | None, **extra: str) -> dict[str, str]:
    """The suite's environment with DEBUG off and the given key (None: no key at all)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "DJANGO_DEBUG", "QUESTLOG_HTTPS")}
    env.update({"DJANGO_DEBUG": "0", "QUESTLOG_DATA_DIR": str(tmp_path / "data"), **extra})
    if secret_key is not None:
        env["DJANGO_SECRET_KEY"] = secret_key
    return env


def manage(tmp_path: Path, *args: str, secret_key: str | None, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment(tmp_path, secret_key, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_refused_in_one_line(result: subprocess.CompletedProcess) -> None:
    assert result.returncode != 0, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Refusing to start: DJANGO_SECRET_KEY"), result.stderr
    assert "Traceback" not in result.stderr


# --- check --deploy ---------------------------------------------------------------------------------


def test_check_deploy_reports_nothing_with_https_and_debug_off(tmp_path):
    result = manage(
        tmp_path,
        "check",
        "--deploy",
        "--fail-level",
        "DEBUG",
        secret_key=A_REAL_KEY,
        QUESTLOG_HTTPS="1",
        DJANGO_ALLOWED_HOSTS="questlog.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
    assert "WARNING" not in result.stdout + result.stderr


def test_without_https_check_deploy_names_what_questlog_https_turns_on(tmp_path):
    result = manage(tmp_path, "check", "--deploy", secret_key=A_REAL_KEY, DJANGO_ALLOWED_HOSTS="questlog.example.com")
    assert set(re.findall(r"security\.W\d+", result.stdout + result.stderr)) == {
        "security.W004",
        "security.W008",
        "security.W012",
        "security.W016",
    }


@pytest.mark.parametrize(
    ("bind", "warned"),
    [
        ("0.0.0.0:8000", True),
        ("[::]:8000", True),
        ("10.0.0.5:8000", True),
        ("questlog.internal:8000", True),
        ("127.0.0.1:8000,0.0.0.0:9000", True),
        ("127.0.0.1:8000", False),
        ("[::1]:8000", False),
        ("localhost:8000", False),
        ("unix:/run/questlog.sock", False),
    ],
)
def test_proxy_bypass_is_judged_by_every_bind_address(bind, warned):
    assert (proxy_bypass_problem(1, bind_addresses({"QUESTLOG_BIND": bind})) is not None) is warned
    assert proxy_bypass_problem(0, bind_addresses({"QUESTLOG_BIND": bind})) is None  # X-Forwarded-For not trusted


def test_check_deploy_warns_when_the_proxy_count_is_set_and_gunicorn_is_reachable_directly(tmp_path):
    """Issue 24, finding 9: with QUESTLOG_PROXY_COUNT=1 and gunicorn on a public address, a client
    that skips the proxy writes X-Forwarded-For itself and escapes the per-address login limit."""
    deploy = {"QUESTLOG_HTTPS": "1", "DJANGO_ALLOWED_HOSTS": "questlog.example.com", "QUESTLOG_PROXY_COUNT": "1"}
    exposed = manage(tmp_path, "check", "--deploy", secret_key=A_REAL_KEY, QUESTLOG_BIND="0.0.0.0:8000", **deploy)
    output = exposed.stdout + exposed.stderr
    assert "questlog.W001" in output and "0.0.0.0:8000" in output and "X-Forwarded-For" in output, output
    behind = manage(tmp_path, "check", "--deploy", "--fail-level", "DEBUG", secret_key=A_REAL_KEY, QUESTLOG_BIND="127.0.0.1:8000", **deploy)
    assert behind.returncode == 0 and "questlog.W001" not in behind.stdout + behind.stderr, behind.stdout + behind.stderr


def test_a_spoofed_forwarded_for_is_what_the_login_throttle_counts_behind_a_proxy(settings, rf):
    """Why the warning above matters: whatever the client wrote left of the proxy's entry is
    ignored, but a client that IS the nearest hop writes the entry the throttle trusts."""
    settings.QUESTLOG_PROXY_COUNT = 1
    through_proxy = rf.get("/", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7", REMOTE_ADDR="127.0.0.1")
    assert client_address(through_proxy) == "203.0.113.7"
    direct = rf.get("/", HTTP_X_FORWARDED_FOR="198.51.100.99", REMOTE_ADDR="203.0.113.7")
    assert client_address(direct) == "198.51.100.99"


def loaded_https_settings(tmp_path: Path, **extra: str) -> dict:
    code = f"from django.conf import settings; import json; print(json.dumps({{n: getattr(settings, n) for n in {HTTPS_SETTINGS!r}}}))"
    env = environment(tmp_path, A_REAL_KEY, DJANGO_SETTINGS_MODULE="config.settings", **extra)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_questlog_https_turns_on_secure_cookies_hsts_the_redirect_and_the_proxy_header(tmp_path):
    https = loaded_https_settings(tmp_path, QUESTLOG_HTTPS="1")
    assert https == {
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "SECURE_SSL_REDIRECT": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": HSTS_SECONDS,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": False,
    }
    assert HSTS_SECONDS >= 365 * 24 * 3600
    assert loaded_https_settings(tmp_path, QUESTLOG_HTTPS="1", QUESTLOG_HSTS_PRELOAD="1")["SECURE_HSTS_PRELOAD"] is True
    plain = loaded_https_settings(tmp_path)
    assert not any(plain[name] for name in HTTPS_SETTINGS), plain


@pytest.mark.django_db
def test_behind_the_proxy_plain_http_is_redirected_and_https_gets_hsts(tmp_path):
    https = loaded_https_settings(tmp_path, QUESTLOG_HTTPS="1")
    https["SECURE_PROXY_SSL_HEADER"] = tuple(https["SECURE_PROXY_SSL_HEADER"])
    with override_settings(**https):
        plain = Client().get("/accounts/login/")
        assert plain.status_code == 301 and plain["Location"] == "https://testserver/accounts/login/"
        proxied = Client().get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
        assert proxied.status_code == 200
        assert proxied["Strict-Transport-Security"] == f"max-age={HSTS_SECONDS}; includeSubDomains"
        assert "secure" in str(proxied.cookies["csrftoken"]).lower()


# --- the secret key ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", REFUSED_KEYS.values(), ids=REFUSED_KEYS.keys())
def test_with_debug_off_a_command_refuses_to_start_without_a_real_secret_key(tmp_path, key):
    assert_refused_in_one_line(manage(tmp_path, "check", secret_key=key))


def test_with_debug_off_a_project_command_is_refused_too(tmp_path):
    assert_refused_in_one_line(manage(tmp_path, "questlog_status", secret_key=None))


def test_with_debug_off_and_a_real_key_a_command_runs(tmp_path):
    result = manage(tmp_path, "check", secret_key=A_REAL_KEY)
    assert result.returncode == 0, result.stdout + result.stderr


def test_with_debug_on_the_development_key_is_still_the_default(tmp_path):
    result = manage(tmp_path, "check", secret_key=None, DJANGO_DEBUG="1")
    assert result.returncode == 0, result.stdout + result.stderr


def test_loading_the_wsgi_application_without_a_key_fails_with_the_reason(tmp_path):
    # What a worker of `gunicorn config.wsgi` does when started without config/gunicorn.py.
    env = environment(tmp_path, None)
    result = subprocess.run([sys.executable, "-c", "import config.wsgi"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "InsecureSecretKey: Refusing to start: DJANGO_SECRET_KEY is unset or empty" in result.stderr


@pytest.mark.long
@pytest.mark.parametrize("command", ["scripts/serve", "gunicorn"])
@pytest.mark.parametrize("key", REFUSED_KEYS.values(), ids=REFUSED_KEYS.keys())
def test_with_debug_off_the_web_server_refuses_to_start_without_a_real_secret_key(tmp_path, command, key):
    argv = [str(ROOT / "scripts" / "serve")] if command == "scripts/serve" else [sys.executable, "-m", "gunicorn", "--config", "config/gunicorn.py"]
    env = environment(tmp_path, key, PYTHON=sys.executable, QUESTLOG_BIND="127.0.0.1:0")
    assert_refused_in_one_line(subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120))
    assert not (tmp_path / "data" / "questlog.sqlite3").exists()  # refused before migrating anything


@pytest.mark.long
def test_with_a_real_key_scripts_serve_and_gunicorn_start_and_send_the_headers(tmp_path, servers):  # noqa: F811
    (tmp_path / "serve").mkdir()
    (tmp_path / "gunicorn").mkdir()
    for server in (serve(tmp_path / "serve", servers), gunicorn(tmp_path / "gunicorn", servers, DJANGO_DEBUG="0")):
        login = httpx.get(server.url + "/accounts/login/", timeout=10)
        assert login.status_code == 200
        assert_security_headers(login.headers)
    assert SERVER_SECRET_KEY not in (DEVELOPMENT_SECRET_KEY, "")


# --- headers ----------------------------------------------------------------------------------------


def csp_directives(header: str) -> dict[str, list[str]]:
    directives = (part.split() for part in header.split(";") if part.strip())
    return {name: sources for name, *sources in directives}


def assert_security_headers(headers) -> None:
    csp = csp_directives(headers["Content-Security-Policy"])
    assert csp["default-src"] == ["'self'"]
    assert csp["script-src"] == ["'self'"]
    assert "'unsafe-inline'" not in csp["style-src"] and "'unsafe-eval'" not in csp["script-src"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert csp["form-action"] == ["'self'"]
    assert csp["base-uri"] == ["'none'"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "same-origin"
    assert headers["X-Frame-Options"] == "DENY"


@pytest.mark.django_db
def test_the_login_page_carries_the_security_headers():
    response = Client().get("/accounts/login/")
    assert response.status_code == 200
    assert_security_headers(response.headers)


@pytest.mark.django_db
def test_the_board_and_a_form_error_carry_the_security_headers(alice):
    client = Client()
    client.force_login(alice)
    board = client.get("/")
    assert board.status_code == 200
    assert_security_headers(board.headers)
    refused = client.post("/tokens/", {"name": ""}, HTTP_HX_REQUEST="true")
    assert refused.status_code in (200, 422)
    assert_security_headers(refused.headers)


@pytest.mark.django_db
def test_api_answers_carry_the_security_headers(alice):
    _, raw = token_create(user=alice, name="headers")
    ok = ApiClient(Client(), raw).get("missions")
    assert ok.status_code == 200
    assert_security_headers(ok.headers)
    unauthorised = ApiClient(Client(), "not-a-token").get("missions")
    assert unauthorised.status_code == 401
    assert_security_headers(unauthorised.headers)
    too_large = ApiClient(Client(), raw).post("missions", raw="x" * (settings.QUESTLOG_MAX_BODY_BYTES + 1))
    assert too_large.status_code == 413  # answered by the body limit, before the rest of the stack
    assert_security_headers(too_large.headers)


INLINE_CODE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "an inline <script>"),
    (re.compile(r"<style\b", re.I), "a <style> element"),
    (re.compile(r"\sstyle\s*=", re.I), "a style attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "an inline event handler"),
    (re.compile(r"\shx-on[:-]", re.I), "an hx-on handler (evaluated code)"),
    (re.compile(r"javascript:", re.I), "a javascript: URL"),
]


def test_no_template_needs_inline_script_or_style():
    # The policy would block them in the browser; this names the file instead.
    found = [
        f"{path.relative_to(ROOT)}: {what}"
        for path in sorted((ROOT / "templates").rglob("*.html"))
        for pattern, what in INLINE_CODE
        if pattern.search(path.read_text())
    ]
    assert found == []
