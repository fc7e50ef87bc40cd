"""The inbox (approvals and milestones waiting for this person, a page at a time, oldest first) and
the decisions made from it or from a mission page."""

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from quests.context_processors import inbox_badge
from quests.forms import DecisionForm, ReviewForm
from quests.models import Approval, Milestone
from quests.selectors import people
from quests.services import approvals, milestones, standing
from quests.web import HtmxHttpRequest
from quests.web.pages import Problem, act, actor, get_or_404, mission_url, page, query_number, render_page, unsent_problem

TEMPLATE = "quests/inbox.html"
FRAGMENTS = {"inbox"}


def inbox_filter(request: HttpRequest) -> people.InboxFilter:
    """The quest and kind the inbox is narrowed to (?quest=<id>&kind=approval|milestone); anything
    else in the query means no narrowing by it."""
    kind = request.GET.get("kind")
    return people.InboxFilter(mission_id=query_number(request.GET.get("quest")), kind=kind if kind in people.INBOX_KINDS else None)


@page("inbox", TEMPLATE, fragments=FRAGMENTS)
def inbox_context(request: HttpRequest, problem: Problem | None = None) -> dict[str, Any]:
    narrowed = inbox_filter(request)
    waiting = people.inbox(request.user, request.GET.get("page") or 1, narrowed)
    inline = {(item.kind, item.obj.pk) for item in waiting.items}
    number = waiting.page.number
    query = {key: value for key, value in (("quest", narrowed.mission_id), ("kind", narrowed.kind)) if value is not None}
    return {
        "items": waiting.items,
        "page": waiting.page,
        "total": waiting.total,
        "proposals": waiting.proposals,
        "narrowed": narrowed,
        "quests": people.inbox_quests(request.user, narrowed.mission_id),
        "kinds": people.INBOX_KINDS,
        # The pager's links keep the filter.
        "filter_query": urlencode(query),
        "just_decided": people.recent_decisions(request.user),
        "undo_seconds": settings.QUESTLOG_UNDO_SECONDS,
        "problem": problem,
        "problem_inline": problem is not None and problem.target in inline,
        # The forms send it as `next`: a decision answers with this same page of the inbox.
        "page_url": reverse("inbox") + (f"?{urlencode(query | ({'page': number} if number > 1 else {}))}" if query or number > 1 else ""),
    } | (
        {}
        if narrowed.active
        else {
            # The navigation shows the same count: handed on, it is not counted a second time.
            "inbox_count": waiting.badge_count,
        }
    )


@login_required
@vary_on_headers("HX-Request")
def inbox(request: HtmxHttpRequest) -> HttpResponse:
    problem = None if request.htmx else unsent_problem(request)
    return render_page(request, TEMPLATE, inbox_context(request, problem), fragments=FRAGMENTS)


@login_required
@require_GET
def inbox_count_badge(request: HttpRequest) -> HttpResponse:
    """The navigation's badge, asked again by every page: 204 while the count is still `since`."""
    badge = inbox_badge(request.user)
    if request.GET.get("since") == str(badge["inbox_count"]):
        return HttpResponse(status=204)
    return HttpResponse(render_to_string("quests/_inbox_count.html", badge))


@login_required
@require_POST
def approval_decide(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    approval = get_or_404(request, Approval, pk)
    form = DecisionForm(request.POST)

    def do() -> None:
        data = form.cleaned_data
        approvals.approval_decide(
            actor=actor(request),
            approval_id=pk,
            decision=data["decision"],
            payload=data.get("payload_json"),
            note=data["note"],
            always=data["always"],
        )

    return act(request, origin=mission_url(approval.mission_id), target=("approval", pk), form=form, do=do)


@login_required
@require_POST
def milestone_review(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    milestone = get_or_404(request, Milestone, pk)
    form = ReviewForm(request.POST)

    def do() -> None:
        data = form.cleaned_data
        milestones.milestone_review(actor=actor(request), milestone_id=pk, action=data["action"], note=data["note"])

    return act(request, origin=mission_url(milestone.mission_id), target=("milestone", pk), form=form, do=do)


@login_required
@require_POST
def approval_undo(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    approval = get_or_404(request, Approval, pk)
    return act(
        request,
        origin=mission_url(approval.mission_id),
        target=("undo", pk),
        do=lambda: approvals.approval_undo(actor=actor(request), approval_id=pk),
    )


@login_required
@require_POST
def standing_decision_revoke(request: HtmxHttpRequest, pk: int, sid: int) -> HttpResponse:
    return act(
        request,
        origin=mission_url(pk),
        target=("standingdecision", sid),
        do=lambda: standing.standing_decision_revoke(actor=actor(request), mission_id=pk, standing_id=sid),
    )
