"""The board: this person's quests a page at a time, newest activity first, filtered by status and
searched by title and objective, polled by htmx."""

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.vary import vary_on_headers

from quests.models import MissionStatus
from quests.selectors import board as board_reads
from quests.storable import Unstorable
from quests.web import HtmxHttpRequest
from quests.web.live import poll_every
from quests.web.pages import Problem, page, render_page, search_text

TEMPLATE = "quests/board.html"
FRAGMENTS = {"quest-list"}


def board_state(request: HttpRequest) -> tuple[str, str, Any, Problem | None]:
    """The filter, search and page the address asks for (an unknown status is no filter), and
    the search's form error: a search no database could run is not run."""
    status = request.GET.get("status") or ""
    try:
        q, refused = search_text(request.GET), None
    except Unstorable as exc:
        q, refused = "", Problem(("search", "q"), exc.message)
    return (status if status in MissionStatus.values else ""), q, request.GET.get("page") or 1, refused


@page("board", TEMPLATE, fragments=FRAGMENTS)
def board_context(request: HttpRequest, problem: Problem | None = None) -> dict[str, Any]:
    status, q, page_number, refused = board_state(request)
    board = board_reads.board(request.user, status or None, q, page_number)
    # The page's own address keeps its filter, search and page (shareable; the back button works).
    state = {key: value for key, value in (("status", status), ("q", q)) if value}
    here = {**state, **({"page": board["page"].number} if board["page"].number > 1 else {})}
    return {
        **board,
        "status": status,
        "q": q,
        "query": urlencode(state),
        "problem": problem or refused,
        "search_refused": refused is not None,
        "page_url": reverse("board") + (f"?{urlencode(here)}" if here else ""),
        # Statuses the search matches anywhere, not only on this page: a quest that starts moves
        # to the top, onto the first page, and changes the counts every page shows.
        "poll_every": poll_every((value for value, _, count in board["status_counts"] if count), running="board", idle="board_idle"),
        "poll_query": urlencode(here),
        "api_missions_url": request.build_absolute_uri("/api/v1/missions"),
    }


@login_required
@vary_on_headers("HX-Request")
def board(request: HtmxHttpRequest) -> HttpResponse:
    since = request.GET.get("since")
    if request.htmx and since:
        status, q, page_number, refused = board_state(request)
        if not refused and since == board_reads.board_version(request.user, status or None, q, page_number):
            return HttpResponse(status=204)
    context = board_context(request)
    return render_page(request, TEMPLATE, context, fragments=FRAGMENTS, status=422 if context["search_refused"] else 200)
