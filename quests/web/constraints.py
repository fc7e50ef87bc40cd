"""A mission's constraints, added, edited and retired from its page."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_POST

from quests.forms import ConstraintForm
from quests.models import Constraint, Mission
from quests.services import missions
from quests.web import HtmxHttpRequest
from quests.web.pages import act, actor, get_or_404, mission_url


def _constraint_or_404(request: HttpRequest, pk: int, cid: int) -> Constraint:
    mission = get_or_404(request, Mission, pk)
    constraint = Constraint.objects.filter(mission=mission, pk=cid).first()
    if constraint is None:
        raise Http404("No such constraint on this mission.")
    return constraint


@login_required
@require_POST
def constraint_add(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    get_or_404(request, Mission, pk)
    form = ConstraintForm(request.POST)
    return act(
        request,
        origin=mission_url(pk),
        target=("constraint", "add"),
        form=form,
        do=lambda: missions.constraint_add(actor=actor(request), mission_id=pk, text=form.cleaned_data["text"]),
    )


@login_required
@require_POST
def constraint_edit(request: HtmxHttpRequest, pk: int, cid: int) -> HttpResponse:
    _constraint_or_404(request, pk, cid)
    form = ConstraintForm(request.POST)
    return act(
        request,
        origin=mission_url(pk),
        target=("constraint", cid),
        form=form,
        do=lambda: missions.constraint_edit(actor=actor(request), mission_id=pk, constraint_id=cid, text=form.cleaned_data["text"]),
    )


@login_required
@require_POST
def constraint_retire(request: HtmxHttpRequest, pk: int, cid: int) -> HttpResponse:
    _constraint_or_404(request, pk, cid)
    return act(
        request,
        origin=mission_url(pk),
        target=("constraint", cid),
        do=lambda: missions.constraint_retire(actor=actor(request), mission_id=pk, constraint_id=cid),
    )
