"""Compaction of the active state (checkpoints.compaction, used by savestate.state_document):
notes beyond the newest N and raw tool outputs are archived with a reference and a preview;
decisions, constraints, approvals, open questions, blockers and dependencies never are."""

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from checkpoints.compaction import PINNED_KINDS, preview
from checkpoints.models import Blob, Record, RecordKind
from checkpoints.services import checkpoint_documents
from quests.models import Mission
from quests.services import missions, records, runs
from quests.services.audit import Actor
from quests.services.savestate import DURABLE_SECTIONS

pytestmark = pytest.mark.django_db


def blob_text(sha: str) -> str:
    return bytes(Blob.objects.get(sha256=sha).data).decode()


def start(user, *, constraints: list[str] | None = None) -> tuple[Actor, Mission, int]:
    actor = Actor(user=user)
    mission, _ = missions.mission_create(actor=actor, title="Offsite", objective="Book a venue", constraints=constraints or [])
    run, _ = runs.run_start(actor=actor, mission_id=mission.pk, agent="test")
    return actor, mission, run.pk


def head_state(mission: Mission) -> tuple[dict, dict]:
    mission.refresh_from_db()
    return checkpoint_documents(mission.head_checkpoint)[0], mission.head_checkpoint.compaction_report


@given(st.text(max_size=600), st.integers(min_value=1, max_value=300))
def test_a_preview_is_a_short_prefix(text, limit):
    short = preview(text, limit)
    assert len(short) <= limit
    assert short == text or text.startswith(short.removesuffix("…"))


@override_settings(QUESTLOG_ACTIVE_NOTES=3, QUESTLOG_PREVIEW_CHARS=20)
def test_notes_beyond_the_newest_n_move_to_blobs_with_a_reference_and_a_preview(alice):
    actor, mission, run_id = start(alice)
    texts = [f"note number {i} with a long tail of words that goes past the preview" for i in range(5)]
    for text in texts:
        records.record_create(actor=actor, run_id=run_id, kind="note", text=text)
    records.checkpoint_create(actor=actor, run_id=run_id, agent_state={})
    state, report = head_state(mission)
    assert [n["text"] for n in state["notes"]] == texts[2:]
    archived = list(Record.objects.filter(mission=mission, kind="note", archived=True).order_by("id"))
    assert len(archived) == 2
    for record, text in zip(archived, texts[:2]):
        assert blob_text(record.blob_id) == text
        assert record.text == preview(text, 20) and len(record.text) <= 20
    assert report["archived_now"]["notes"] == 2
    assert report["archived_now"]["bytes"] == sum(len(t.encode()) for t in texts[:2])
    assert report["archived_total"]["notes"] == 2
    assert state["archive"] == report["archived_total"]


@override_settings(QUESTLOG_ACTIVE_NOTES=2)
def test_raw_tool_outputs_stay_only_as_references_and_count_in_the_report(alice):
    actor, mission, run_id = start(alice)
    outputs = [f"output {i} " + "x" * 1000 for i in range(3)]
    for text in outputs:
        records.record_create(actor=actor, run_id=run_id, kind="tool_output", text=text)
    records.checkpoint_create(actor=actor, run_id=run_id, agent_state={})
    state, report = head_state(mission)
    assert [blob_text(ref["blob"]) for ref in state["tool_outputs"]] == outputs[1:]
    assert all(len(ref["preview"]) < 300 for ref in state["tool_outputs"])
    assert report["archived_total"]["tool_outputs"] == 3
    assert report["archived_total"]["bytes"] == sum(len(t) for t in outputs)
    records.record_create(actor=actor, run_id=run_id, kind="tool_output", text="one more")
    records.checkpoint_create(actor=actor, run_id=run_id, agent_state={})
    _, report = head_state(mission)
    assert report["archived_now"]["tool_outputs"] == 1
    assert report["archived_total"]["tool_outputs"] == 4


def test_every_checkpoint_carries_a_short_compaction_report(alice):
    actor, mission, run_id = start(alice, constraints=["Budget 4,000 EUR"])
    records.record_create(actor=actor, run_id=run_id, kind="decision", text="Lakeside")
    records.checkpoint_create(actor=actor, run_id=run_id, agent_state={"a": 1})
    _, report = head_state(mission)
    assert set(report) >= {"kept", "archived_now", "archived_total", "summary"}
    assert report["kept"]["decisions"] == 1 and report["kept"]["constraints"] == 1
    assert "every decision, constraint, approval, open question, blocker and dependency" in report["summary"]
    assert len(report["summary"]) < 300


@override_settings(QUESTLOG_ACTIVE_NOTES=2)
def test_a_second_pass_archives_only_what_the_first_left_behind(alice):
    actor, mission, run_id = start(alice)
    for i in range(4):
        records.record_create(actor=actor, run_id=run_id, kind="note", text=f"n{i}")
    records.checkpoint_create(actor=actor, run_id=run_id, agent_state={})
    records.record_create(actor=actor, run_id=run_id, kind="note", text="n4")
    records.checkpoint_create(actor=actor, run_id=run_id, agent_state={})
    state, report = head_state(mission)
    assert [n["text"] for n in state["notes"]] == ["n3", "n4"]
    assert report["archived_now"]["notes"] == 1
    assert report["archived_total"]["notes"] == 3


KINDS = st.sampled_from([k.value for k in RecordKind])
TEXTS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=400)
STEPS = st.lists(
    st.tuples(
        KINDS,
        TEXTS,
        st.one_of(st.none(), st.dictionaries(st.sampled_from("abc"), st.integers(), max_size=2)),
        st.booleans(),
        st.integers(min_value=0, max_value=6),
    ),
    min_size=1,
    max_size=30,
)


@given(steps=STEPS, keep=st.integers(min_value=0, max_value=4), constraints=st.lists(TEXTS, max_size=3))
@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_compaction_never_drops_a_pinned_record_and_loses_no_text(alice, steps, keep, constraints):
    """Random mixes of records, resolutions and checkpoints: in the head's active state every
    live pinned record is whole, every constraint is there, the newest N notes are whole, and
    every other live note or tool output can be read back in full from its archived blob."""
    with override_settings(QUESTLOG_ACTIVE_NOTES=keep, QUESTLOG_PREVIEW_CHARS=16):
        actor, mission, run_id = start(alice, constraints=constraints)
        originals: dict[int, str] = {}
        for kind, text, data, checkpoint_after, resolve_pick in steps:
            live = [pk for pk in originals if not Record.objects.get(pk=pk).resolved]
            resolves = live[resolve_pick % len(live)] if live and resolve_pick == 6 else None
            record, _ = records.record_create(actor=actor, run_id=run_id, kind=kind, text=text, data=data, resolves=resolves)
            originals[record.pk] = text
            if checkpoint_after:
                records.checkpoint_create(actor=actor, run_id=run_id, agent_state={"n": len(originals)})
        records.checkpoint_create(actor=actor, run_id=run_id, agent_state={"final": True})
        state, report = head_state(mission)

        live = list(Record.objects.filter(mission=mission, resolved=False, abandoned=False).order_by("id"))
        for kind, section in DURABLE_SECTIONS.items():
            expected = [(r.pk, originals[r.pk], r.data) for r in live if r.kind == kind]
            assert [(d["id"], d["text"], d["data"]) for d in state[section]] == expected
        for record in live:
            if record.kind in PINNED_KINDS or record.kind == RecordKind.EVIDENCE:
                assert (record.text, record.archived, record.blob_id) == (originals[record.pk], False, None)
        assert [c["text"] for c in state["constraints"]] == constraints

        # Archiving is one-way: a note once archived stays archived even if newer ones are
        # resolved later, so the active notes are the newest N of those not archived yet.
        notes = [r for r in live if r.kind == RecordKind.NOTE]
        active = [r for r in notes if not r.archived]
        assert len(active) <= keep
        assert [(n["id"], n["text"]) for n in state["notes"]] == [(r.pk, originals[r.pk]) for r in active]
        for record in notes:
            if record.archived:
                assert blob_text(record.blob_id) == originals[record.pk]
                assert record.text == preview(originals[record.pk], 16)
                assert all(record.pk < r.pk for r in active)
        for record in (r for r in live if r.kind == RecordKind.TOOL_OUTPUT):
            assert blob_text(record.blob_id) == originals[record.pk]
        assert report["archived_total"]["notes"] == Record.objects.filter(mission=mission, kind="note", archived=True).count()
