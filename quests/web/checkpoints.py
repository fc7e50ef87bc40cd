"""One checkpoint: its state, and what changed against its parent or any other checkpoint of the
same mission (chosen by its number, or from a few quick choices)."""

from typing import cast

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from checkpoints.models import Checkpoint
from checkpoints.refmap_models import CheckpointQuerySet
from checkpoints.services import checkpoint_documents
from quests.models import Mission
from quests.selectors import compare
from quests.services import machine
from quests.services.access import visible
from quests.web.pages import NUMBER_DIGITS, actor, query_number


@login_required
def checkpoint_detail(request: HttpRequest, pk: int) -> HttpResponse:
    # With its reference maps (checkpoints.refmaps) in the same query: the page reads both documents.
    checkpoint = cast(CheckpointQuerySet, visible(actor(request), Checkpoint)).with_refs().filter(pk=pk).first()
    if checkpoint is None:
        raise Http404(f"No checkpoint with id {pk}.")
    mission = Mission.objects.get(pk=checkpoint.mission_id)
    raw_seq = request.GET.get("compare")
    asked_seq = query_number((raw_seq or "").strip().lstrip("#"))
    against_id = query_number(request.GET.get("against"))
    choices = compare.compare_choices(checkpoint, mission, against_id=against_id, seq=asked_seq)
    error = _compare_error(raw_seq, asked_seq, choices, checkpoint)
    chosen = None if raw_seq is None or error else choices.asked
    if chosen is None:
        asked = choices.by_id.get(against_id or 0)
        chosen = asked if asked is not None and asked.pk != checkpoint.pk else choices.by_id.get(checkpoint.parent_id)
    # The choices are light rows; the one compared with is read whole (its state references).
    against = Checkpoint.objects.with_refs().get(pk=chosen.pk) if chosen else None
    state, agent_state = checkpoint_documents(checkpoint)
    changes: list[compare.Change] = []
    if against is not None:
        old_state, old_agent_state = checkpoint_documents(against)
        changes = compare.diff(compare.document(old_state, old_agent_state), compare.document(state, agent_state))
    return render(
        request,
        "quests/checkpoint.html",
        {
            "checkpoint": checkpoint,
            "mission": mission,
            "state": state,
            "agent_state": agent_state,
            "quick": choices.quick,
            "parent": choices.by_id.get(checkpoint.parent_id),
            "against": against,
            "changes": changes,
            "compare_error": error,
            "compare_value": (raw_seq or "")[: NUMBER_DIGITS + 2] if error else (against.seq if against else ""),
            "can_restore": machine.can(mission, "restore"),
        },
        status=422 if error else 200,
    )


def _compare_error(raw: str | None, seq: int | None, choices: compare.CompareChoices, checkpoint: Checkpoint) -> str:
    """Why the number typed in "Compare with #" names nothing to compare with ("" when it does)."""
    if raw is None:
        return ""
    if seq is None:
        return "Write the number of a checkpoint of this mission, such as 12."
    if seq == checkpoint.seq:
        return f"#{seq} is this checkpoint: choose another one to compare with."
    if choices.asked is None:
        return f"This mission has no checkpoint #{seq}."
    return ""
