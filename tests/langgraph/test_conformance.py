"""QuestlogSaver passes LangGraph's own conformance suite (langgraph-checkpoint-conformance) at the
full level against a live server on PostgreSQL: every capability detected, every test passed."""

import asyncio

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, DetectedCapabilities

from questlog_client.langgraph import QuestlogSaver
from quests.services.tokens import token_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.long]


def test_every_capability_is_detected():
    saver = QuestlogSaver("http://127.0.0.1:9", "unused")
    assert DetectedCapabilities.from_instance(saver).missing == frozenset()


def test_it_passes_the_conformance_suite_at_the_full_level(live_server, django_user_model, capsys):
    # A new user for each capability suite: the suite reuses thread ids across its suites.
    tokens = [token_create(user=django_user_model.objects.create_user(f"graph-{n}", password="x"), name="conformance")[1] for n in range(len(ALL_CAPABILITIES))]

    @checkpointer_test(name="QuestlogSaver")
    async def questlog_saver():
        saver = QuestlogSaver(live_server.url, tokens.pop(), backoff=0.01)
        yield saver
        saver.close()

    report = asyncio.run(validate(questlog_saver))
    report.print_report()
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert failures == {}
    assert report.conformance_level() == "FULL"
    assert {name for name, result in report.results.items() if result.detected and result.passed} == {c.value for c in ALL_CAPABILITIES}
    assert sum(result.tests_passed for result in report.results.values()) == 81
