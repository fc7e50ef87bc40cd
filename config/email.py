"""Django's MAILERS setting (Django 6.1's successor to the EMAIL_* settings) from one URL,
QUESTLOG_EMAIL_URL, read by dj-email-url:

    smtp://user:pass@host:25          SMTP; `?tls=1` for STARTTLS (port 587 unless given)
    smtps://user:pass@host:465        SMTP over TLS from the first byte (port 465 unless given)
    console:                          printed in the terminal of the process that sends it
    file:                             one file per mail under the data directory's `mail/` (or file:///abs/path)
"""

import urllib.parse
from pathlib import Path
from typing import Any

import dj_email_url

EMAIL_TIMEOUT = 10  # seconds: a mail server that hangs holds a worker no longer than this
BACKENDS = {
    "smtp": "django.core.mail.backends.smtp.EmailBackend",
    "smtps": "django.core.mail.backends.smtp.EmailBackend",
    "console": "django.core.mail.backends.console.EmailBackend",
    "file": "django.core.mail.backends.filebased.EmailBackend",
}


def mailers(url: str, data_dir: Path) -> dict[str, Any]:
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in BACKENDS:
        raise ValueError(f"QUESTLOG_EMAIL_URL: unknown scheme {scheme!r} (smtp, smtps, console or file)")
    options: dict[str, Any] = {}
    if scheme == "file":
        path = urllib.parse.urlsplit(url).path
        options["file_path"] = path if path not in ("", "/") else str(data_dir / "mail")
    elif scheme in ("smtp", "smtps"):
        # dj-email-url reads smtps as STARTTLS (and warns that it will drop it); SMTPS is implicit TLS.
        conf = dj_email_url.parse("smtp" + url[len(scheme) :])
        ssl = scheme == "smtps" or conf["EMAIL_USE_SSL"]
        tls = conf["EMAIL_USE_TLS"] and not ssl
        explicit_port = urllib.parse.urlsplit(url).port
        options = {
            "host": conf["EMAIL_HOST"],
            "port": explicit_port or (465 if ssl else 587 if tls else 25),
            "username": conf["EMAIL_HOST_USER"] or "",
            "password": conf["EMAIL_HOST_PASSWORD"] or "",
            "use_ssl": ssl,
            "use_tls": tls,
            "timeout": conf["EMAIL_TIMEOUT"] or EMAIL_TIMEOUT,
        }
    return {"default": {"BACKEND": BACKENDS[scheme], "OPTIONS": options}}
