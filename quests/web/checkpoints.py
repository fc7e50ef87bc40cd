"""One checkpoint: its state, and what changed against its parent or another checkpoint of the
same mission."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from checkpoints.models import Checkpoint
from checkpoints.services import checkpoint_documents
from quests import selectors, statediff
from quests.models import Mission
from quests.services import machine
from quests.web.pages import get_or_404


@login_required
def checkpoint_detail(request: HttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_or_404(request, Checkpoint, pk)
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
