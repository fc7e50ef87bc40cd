"""This project's own `manage.py check --deploy` checks (beside Django's security.* ones)."""

import os

from django.conf import settings
from django.core import checks

from config.deploy import bind_addresses, proxy_bypass_problem


@checks.register(checks.Tags.security, deploy=True)
def check_proxy_only_reachable_through_the_proxy(app_configs, **kwargs) -> list[checks.CheckMessage]:
    # QUESTLOG_BIND is gunicorn's setting (config/gunicorn.py reads it from the same environment).
    problem = proxy_bypass_problem(settings.QUESTLOG_PROXY_COUNT, bind_addresses(os.environ))
    if problem is None:
        return []
    return [
        checks.Warning(
            problem,
            hint=(
                "Bind gunicorn to 127.0.0.1 or a unix socket (QUESTLOG_BIND) with the proxy on the same machine, "
                "or let a firewall admit only the proxy to that port; otherwise set QUESTLOG_PROXY_COUNT=0."
            ),
            id="questlog.W001",
        )
    ]
