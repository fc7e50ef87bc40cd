"""A mission's whole operation ledger, a page at a time (the mission page shows only what needs
someone and the newest completed operations)."""

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from quests.models import Mission
from quests.selectors.ledger import STATUS_OF_GROUP, ledger_page, ledger_status
from quests.web.pages import get_or_404


@login_required
@require_safe
def mission_ledger(request: HttpRequest, pk: int) -> HttpResponse:
    mission = get_or_404(request, Mission, pk)
    group = ledger_status(request.GET.get("status"))
    found = ledger_page(mission, group, request.GET.get("page"))
    return render(
        request,
        "quests/ledger.html",
        {
            "mission": mission,
            "page": found,
            "status": group,
            "groups": list(STATUS_OF_GROUP),
            # The pager's links keep the filter.
            "query": urlencode({"status": group}) if group else "",
        },
    )
