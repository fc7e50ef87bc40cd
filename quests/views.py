"""The pages people use. Thin: each action parses a form, calls the one service that owns the rule,
and answers with the affected fragment (htmx) or a redirect back (a plain form POST). A service's
refusal is shown as a form error on the page it came from, never as a 500."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRefresh

from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_documents
from quests import selectors, statediff
from quests.forms import ConstraintForm, DecisionForm, RestoreForm, ReviewForm, TokenForm, first_error
from quests.models import Approval, Constraint, Milestone, Mission, MissionStatus
from quests.services import approvals, machine, missions, tokens
from quests.services.access import get_for
from quests.services.audit import Actor
from quests.services.errors import NotFound, ServiceError
from quests.services.inbox import inbox_count


@dataclass
class Problem:
    """Why the form a person just sent did nothing, with what they typed so it is not lost."""

    target: tuple[str, Any]
    message: str
    values: dict[str, Any] = field(default_factory=dict)


def _actor(request: HttpRequest) -> Actor:
    return Actor(user=request.user)


def _get(request: HttpRequest, model, pk: int):
    """The object if this person may see it; another user's object is a 404 like a missing one."""
    try:
        return get_for(_actor(request), model, pk)
    except NotFound:
        raise Http404(f"No {model._meta.verbose_name} with id {pk}.")


def _with_inbox_count(request: HttpRequest, html: str) -> str:
    # The navigation's inbox count changes with most actions: htmx swaps it out of band.
    return html + render_to_string("quests/_inbox_count.html", {"inbox_count": inbox_count(request.user), "oob": True})


def _render_page(request: HttpRequest, template: str, context: dict[str, Any], *, fragments: set[str], status: int = 200) -> HttpResponse:
    """The full page, or the fragment an htmx request targets (`page.html#fragment`)."""
    target = request.htmx.target if request.htmx else None
    if target in fragments:
        html = render_to_string(f"{template}#{target.replace('-', '_')}", context, request)
        return HttpResponse(_with_inbox_count(request, html), status=status)
    return render(request, template, context, status=status)


# ---- page contexts ----------------------------------------------------------------------------

def _board_context(request: HttpRequest, problem: Problem | None = None) -> dict[str, Any]:
    status = request.GET.get("status") or ""
    if status not in MissionStatus.values:
        status = ""
    return {
        **selectors.board(request.user, status or None),
        "status": status,
        "version": selectors.board_version(request.user),
        "problem": problem,
        "page_url": reverse("board") + (f"?status={status}" if status else ""),
        "api_missions_url": request.build_absolute_uri("/api/v1/missions"),
    }


def _mission_context(request: HttpRequest, pk: int, problem: Problem | None = None, *, mission: Mission | None = None) -> dict[str, Any]:
    mission = mission or _get(request, Mission, pk)
    page = selectors.mission_page(mission)
    inline = {("constraint", "add"), ("controls", pk), ("restore", pk)}
    inline |= {("approval", a.pk) for a in page.pending_approvals}
    inline |= {("milestone", m.pk) for m in page.milestones if m.review_status == "pending_review" and not m.withdrawn}
    inline |= {("constraint", c.pk) for c in page.constraints if c.retired_at is None}
    return {
        "page": page,
        "mission": page.mission,
        "version": selectors.mission_version(page.mission),
        "problem": problem,
        # A form that vanished with the change (an approval someone else decided) shows its
        # problem at the top instead.
        "problem_inline": problem is not None and problem.target in inline,
        "page_url": reverse("mission", args=[page.mission.pk]),
    }


def _inbox_context(request: HttpRequest, problem: Problem | None = None) -> dict[str, Any]:
    items = selectors.inbox(request.user)
    inline = {(item.kind, item.obj.pk) for item in items}
    return {
        "items": items,
        "problem": problem,
        "problem_inline": problem is not None and problem.target in inline,
        "page_url": reverse("inbox"),
    }


def _tokens_context(request: HttpRequest, problem: Problem | None = None, *, form: TokenForm | None = None, new_token: str = "") -> dict[str, Any]:
    return {
        "tokens": selectors.tokens(request.user),
        "form": form or TokenForm(missions=selectors.token_missions(request.user)),
        "new_token": new_token,
        "problem": problem,
        "page_url": reverse("tokens"),
        "api_missions_url": request.build_absolute_uri("/api/v1/missions"),
    }


# url name -> (template, context builder, fragments an action may swap)
PAGES: dict[str, tuple[str, Callable[..., dict[str, Any]], set[str]]] = {
    "board": ("quests/board.html", _board_context, {"quest-list"}),
    "mission": ("quests/mission.html", _mission_context, {"mission-body"}),
    "inbox": ("quests/inbox.html", _inbox_context, {"inbox"}),
    "tokens": ("quests/tokens.html", _tokens_context, {"tokens"}),
}


def _origin(request: HttpRequest, default: str) -> str:
    """Where the form was sent from (its hidden `next`), if that is one of our pages."""
    candidate = request.POST.get("next") or ""
    if candidate and url_has_allowed_host_and_scheme(candidate, allowed_hosts={request.get_host()}):
        try:
            if resolve(urlsplit(candidate).path).url_name in PAGES:
                return candidate
        except Resolver404:
            pass
    return default


def _answer(request: HttpRequest, origin: str, problem: Problem | None) -> HttpResponse:
    """After an action: re-render the page it came from (the targeted fragment for htmx, the whole
    page when there is a form error) or redirect back to it."""
    match = resolve(urlsplit(origin).path)
    template, build, fragments = PAGES[match.url_name]
    status = 422 if problem else 200
    if request.htmx:
        if request.htmx.target not in fragments:
            return HttpResponseClientRefresh()
        return _render_page(request, template, build(request, problem=problem, **match.kwargs), fragments=fragments, status=status)
    if problem:
        return render(request, template, build(request, problem=problem, **match.kwargs), status=status)
    return redirect(origin)


def _act(request: HttpRequest, *, origin: str, target: tuple[str, Any], form=None, do: Callable[[], Any]) -> HttpResponse:
    problem = None
    if form is not None and not form.is_valid():
        problem = Problem(target, first_error(form), request.POST.dict())
    else:
        try:
            do()
        except NotFound:
            raise Http404("Nothing with that id here.")
        except ServiceError as exc:
            problem = Problem(target, exc.message, request.POST.dict())
    return _answer(request, _origin(request, origin), problem)


def _mission_url(mission_id: int) -> str:
    return reverse("mission", args=[mission_id])


# ---- pages --------------------------------------------------------------------------------------

@login_required
@vary_on_headers("HX-Request")
def board(request: HttpRequest) -> HttpResponse:
    since = request.GET.get("since")
    if request.htmx and since and since == selectors.board_version(request.user):
        return HttpResponse(status=204)
    return _render_page(request, "quests/board.html", _board_context(request), fragments={"quest-list"})


@login_required
@vary_on_headers("HX-Request")
def mission_detail(request: HttpRequest, pk: int) -> HttpResponse:
    mission = _get(request, Mission, pk)
    since = request.GET.get("since")
    if request.htmx and since and since == selectors.mission_version(mission):
        return HttpResponse(status=204)
    return _render_page(request, "quests/mission.html", _mission_context(request, pk, mission=mission), fragments={"mission-body"})


@login_required
@vary_on_headers("HX-Request")
def inbox(request: HttpRequest) -> HttpResponse:
    return _render_page(request, "quests/inbox.html", _inbox_context(request), fragments={"inbox"})


@login_required
def checkpoint_detail(request: HttpRequest, pk: int) -> HttpResponse:
    checkpoint = _get(request, Checkpoint, pk)
    mission = Mission.objects.get(pk=checkpoint.mission_id)
    others = list(
        Checkpoint.objects.filter(mission_id=mission.pk).only(*selectors.CHECKPOINT_LIST_FIELDS).order_by("-seq")
    )
    against = _against(request, checkpoint, others)
    state, agent_state = checkpoint_documents(checkpoint)
    changes: list[statediff.Change] = []
    if against is not None:
        old_state, old_agent_state = checkpoint_documents(against)
        changes = statediff.diff(statediff.document(old_state, old_agent_state), statediff.document(state, agent_state))
    return render(
        request,
        "quests/checkpoint.html",
        {
            "checkpoint": checkpoint,
            "mission": mission,
            "state": state,
            "agent_state": agent_state,
            "others": [c for c in others if c.pk != checkpoint.pk],
            "parent": next((c for c in others if c.pk == checkpoint.parent_id), None),
            "against": against,
            "changes": changes,
            "can_restore": machine.can(mission, "restore"),
        },
    )


def _against(request: HttpRequest, checkpoint: Checkpoint, others: list[Checkpoint]) -> Checkpoint | None:
    """The checkpoint to compare with: the one asked for (of the same mission), else the parent."""
    by_id = {c.pk: c for c in others}
    raw = request.GET.get("against", "")
    chosen = by_id.get(int(raw)) if raw.isdigit() and int(raw) != checkpoint.pk else None
    chosen = chosen or (by_id.get(checkpoint.parent_id) if checkpoint.parent_id else None)
    # The list holds light rows; the one compared with is read whole (its state references).
    return Checkpoint.objects.get(pk=chosen.pk) if chosen else None


@login_required
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    fragments = {"tokens"}
    if request.method == "GET":
        return _render_page(request, "quests/tokens.html", _tokens_context(request), fragments=fragments)
    form = TokenForm(request.POST, missions=selectors.token_missions(request.user))
    if not form.is_valid():
        problem = Problem(("token", "create"), first_error(form), request.POST.dict())
        return _render_page(request, "quests/tokens.html", _tokens_context(request, problem, form=form), fragments=fragments, status=422)
    try:
        _, raw = tokens.token_create(user=request.user, name=form.cleaned_data["name"], mission=form.cleaned_data["mission"])
    except ServiceError as exc:
        problem = Problem(("token", "create"), exc.message, request.POST.dict())
        return _render_page(request, "quests/tokens.html", _tokens_context(request, problem, form=form), fragments=fragments, status=422)
    # Shown once, in this answer only: it is stored as a hash and cannot be shown again.
    return _render_page(request, "quests/tokens.html", _tokens_context(request, new_token=raw), fragments=fragments)


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request, origin=reverse("tokens"), target=("agenttoken", pk),
        do=lambda: tokens.token_revoke(user=request.user, token_id=pk),
    )


# ---- approvals and milestones -----------------------------------------------------------------

@login_required
@require_POST
def approval_decide(request: HttpRequest, pk: int) -> HttpResponse:
    approval = _get(request, Approval, pk)
    form = DecisionForm(request.POST)

    def do() -> None:
        data = form.cleaned_data
        approvals.approval_decide(
            actor=_actor(request), approval_id=pk, decision=data["decision"], payload=data.get("payload_json"), note=data["note"]
        )

    return _act(request, origin=_mission_url(approval.mission_id), target=("approval", pk), form=form, do=do)


@login_required
@require_POST
def milestone_review(request: HttpRequest, pk: int) -> HttpResponse:
    milestone = _get(request, Milestone, pk)
    form = ReviewForm(request.POST)

    def do() -> None:
        data = form.cleaned_data
        approvals.milestone_review(actor=_actor(request), milestone_id=pk, action=data["action"], note=data["note"])

    return _act(request, origin=_mission_url(milestone.mission_id), target=("milestone", pk), form=form, do=do)


# ---- mission controls -------------------------------------------------------------------------

@login_required
@require_POST
def mission_pause(request: HttpRequest, pk: int) -> HttpResponse:
    _get(request, Mission, pk)
    return _act(request, origin=_mission_url(pk), target=("controls", pk), do=lambda: missions.mission_pause(actor=_actor(request), mission_id=pk))


@login_required
@require_POST
def mission_unpause(request: HttpRequest, pk: int) -> HttpResponse:
    _get(request, Mission, pk)
    return _act(request, origin=_mission_url(pk), target=("controls", pk), do=lambda: missions.mission_unpause(actor=_actor(request), mission_id=pk))


def _confirm(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    """The confirmation step: a panel in place for htmx, its own page for a plain browser."""
    if request.htmx:
        return render(request, "quests/confirm.html#confirm_panel", context)
    return render(request, "quests/confirm.html", context)


@login_required
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def mission_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    mission = _get(request, Mission, pk)
    if request.method == "GET" or request.POST.get("confirmed") != "yes":
        return _confirm(request, {"mission": mission, "what": "cancel", "page_url": _mission_url(pk)})
    return _act(request, origin=_mission_url(pk), target=("controls", pk), do=lambda: missions.mission_cancel(actor=_actor(request), mission_id=pk))


@login_required
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def mission_restore(request: HttpRequest, pk: int) -> HttpResponse:
    mission = _get(request, Mission, pk)
    form = RestoreForm(request.POST if request.method == "POST" else request.GET)
    if request.method == "POST" and form.is_valid() and form.cleaned_data["confirmed"]:
        checkpoint_id = form.cleaned_data["checkpoint"]
        return _act(
            request, origin=_mission_url(pk), target=("restore", pk),
            do=lambda: missions.mission_restore(actor=_actor(request), mission_id=pk, checkpoint_id=checkpoint_id),
        )
    target = None
    if form.is_valid():
        target = Checkpoint.objects.filter(mission=mission, pk=form.cleaned_data["checkpoint"]).first()
    if target is None:
        problem = Problem(("restore", pk), "Choose one of this mission's checkpoints to restore to.")
        if request.htmx:
            context = {"mission": mission, "what": "restore", "problem": problem, "page_url": _mission_url(pk)}
            return render(request, "quests/confirm.html#confirm_panel", context, status=422)
        return _answer(request, _mission_url(pk), problem)
    facts = {
        "constraints": mission.constraints.filter(retired_at__isnull=True).count(),
        "operations": mission.operations.count(),
        "later": Checkpoint.objects.filter(mission=mission, seq__gt=target.seq).count(),
    }
    return _confirm(request, {"mission": mission, "what": "restore", "target": target, "facts": facts, "page_url": _mission_url(pk)})


# ---- constraints --------------------------------------------------------------------------------

@login_required
@require_POST
def constraint_add(request: HttpRequest, pk: int) -> HttpResponse:
    _get(request, Mission, pk)
    form = ConstraintForm(request.POST)
    return _act(
        request, origin=_mission_url(pk), target=("constraint", "add"), form=form,
        do=lambda: missions.constraint_add(actor=_actor(request), mission_id=pk, text=form.cleaned_data["text"]),
    )


def _constraint(request: HttpRequest, pk: int, cid: int) -> Constraint:
    mission = _get(request, Mission, pk)
    constraint = Constraint.objects.filter(mission=mission, pk=cid).first()
    if constraint is None:
        raise Http404("No such constraint on this mission.")
    return constraint


@login_required
@require_POST
def constraint_edit(request: HttpRequest, pk: int, cid: int) -> HttpResponse:
    _constraint(request, pk, cid)
    form = ConstraintForm(request.POST)
    return _act(
        request, origin=_mission_url(pk), target=("constraint", cid), form=form,
        do=lambda: missions.constraint_edit(actor=_actor(request), mission_id=pk, constraint_id=cid, text=form.cleaned_data["text"]),
    )


@login_required
@require_POST
def constraint_retire(request: HttpRequest, pk: int, cid: int) -> HttpResponse:
    _constraint(request, pk, cid)
    return _act(
        request, origin=_mission_url(pk), target=("constraint", cid),
        do=lambda: missions.constraint_retire(actor=_actor(request), mission_id=pk, constraint_id=cid),
    )

