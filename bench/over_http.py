"""bench/bench_vs_langgraph.py's paths over HTTP to the web server as `make serve` runs it (started
on the benchmark's database, stopped by PID): a checkpoint POSTed by one agent in a loop, and
QuestlogSaver driven as LangGraph's loop drives a checkpointer, each against PostgresSaver in the
same alternating rounds. Each prints its figures and adds its goals (issues 10, 11 and 20).
Imported once Django is set up (`common.setup`)."""

import uuid

import common
from langgraph.checkpoint.postgres import PostgresSaver
from rounds import GOALS, ISSUE_20, Thread, goal, rounds, show, timed
from workload import HISTORY_LONG, HISTORY_SHORT, HTTP_SAMPLES, KEY_BYTES, KEYS, ROUNDS


def http_checkpoints(saver: PostgresSaver, database_url: str) -> None:
    """One agent POSTing checkpoints in a loop, through Questlog's own client (`questlog_client`,
    what an agent calls Questlog with, and what QuestlogSaver runs on: the goal's figure) and through
    a bare `httpx.Client` on a run of its own (the figure earlier runs gave), in the same rounds as
    PostgresSaver's put."""
    import server

    from questlog_client.core import Connection

    web = server.start_server(database_url)
    try:
        token = server.agent_token("http")
        agent = server.Agent(web.url, token)
        connection = Connection(web.url, token)
        started, started_bare = agent.start("http checkpoints"), agent.start("http checkpoints, bare httpx")
        assert started is not None and started_bare is not None, agent.failures
        (_, run_id), (_, bare_run_id) = started, started_bare
        http_state = common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=99)
        bare_state = common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=95)
        lg_state = common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=98)
        thread = Thread(saver, f"http-{uuid.uuid4().hex[:8]}")

        def client_checkpoint(state: dict) -> None:
            connection.request("POST", f"runs/{run_id}/checkpoints", {"agent_state": state, "key": server.key()})

        paths = {
            "http": lambda: (lambda s: timed(lambda: client_checkpoint(s)))(http_state.next()[0]),
            "bare": lambda: (lambda s: timed(lambda: agent.checkpoint(bare_run_id, s)))(bare_state.next()[0]),
            "put": lambda: thread.put(*lg_state.next()),
        }
        with common.phase(f"{ROUNDS} alternating rounds of {HTTP_SAMPLES} HTTP checkpoints of each client and puts"):
            took = rounds(paths, count=ROUNDS, samples=HTTP_SAMPLES)
        connection.close()
        agent.close()
        if agent.failures:
            raise RuntimeError("non-2xx answers:\n" + "\n".join(agent.failures[:20]))
    finally:
        web.stop()
    print(f"\n== a checkpoint POSTed over HTTP through questlog_client, one agent in a loop (make serve, workers: {server.WORKERS})")
    put = show("PostgresSaver put (same run)", took["put"])
    http = show("POST /api/v1/runs/{id}/checkpoints", took["http"])
    bare = show("the same POST through a bare httpx.Client", took["bare"])
    common.figure("HTTP checkpoint vs put (speed)", put / http, "×", ".2f")
    common.figure("HTTP checkpoint through a bare httpx.Client vs put (speed)", put / bare, "×", ".2f")
    common.load_note()
    goal("HTTP checkpoint, one agent, vs PostgresSaver put (speed)", put / http, ">=", 0.25)
    ISSUE_20.append(("checkpoint POSTed over HTTP vs put (speed)", put / http, ">=", 0.15))


def saver_over_http(saver: PostgresSaver, database_url: str) -> None:
    """QuestlogSaver (questlog_client.langgraph) driven as LangGraph's loop drives a checkpointer,
    over HTTP to `make serve`, against PostgresSaver in the same rounds: `put`, and `get_tuple` of
    the latest checkpoint of threads with 10 and with HISTORY_LONG checkpoints."""
    import server

    from questlog_client.langgraph import QuestlogSaver

    web = server.start_server(database_url)
    try:
        with QuestlogSaver(web.url, server.agent_token("saver")) as questlog:
            pg_state = common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=97)
            ql_state = common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=96)
            pg_thread, ql_thread = Thread(saver, f"saver-put-{uuid.uuid4().hex[:8]}"), Thread(questlog, f"put-{uuid.uuid4().hex[:8]}")
            histories = {}
            with common.phase(f"QuestlogSaver and PostgresSaver threads of {HISTORY_SHORT} and {HISTORY_LONG} checkpoints"):
                for name, target in (("ql", questlog), ("pg", saver)):
                    for n in (HISTORY_SHORT, HISTORY_LONG):
                        thread = Thread(target, f"history-{name}-{n}-{uuid.uuid4().hex[:8]}")
                        state = common.AgentState(keys=KEYS, key_bytes=KEY_BYTES, seed=n)
                        for _ in range(n):
                            thread.put(*state.next())
                        histories[f"{name}_{n}"] = thread
            paths = {
                "put": lambda: pg_thread.put(*pg_state.next()),
                "ql_put": lambda: ql_thread.put(*ql_state.next()),
                **{f"get_{key}": (lambda t: lambda: timed(t.get_tuple))(thread) for key, thread in histories.items()},
            }
            with common.phase(f"{ROUNDS} alternating rounds of {HTTP_SAMPLES} samples per path"):
                took = rounds(paths, count=ROUNDS, samples=HTTP_SAMPLES)
    finally:
        web.stop()
    print(f"\n== QuestlogSaver over HTTP (make serve, workers: {server.WORKERS}) and PostgresSaver, same rounds")
    put = show("PostgresSaver put", took["put"])
    ql_put = show("QuestlogSaver put (POST /api/v1/langgraph/checkpoints)", took["ql_put"])
    common.figure("QuestlogSaver put vs PostgresSaver put (speed)", put / ql_put, "×", ".2f")
    p = {
        key[4:]: show(f"{'QuestlogSaver' if key.startswith('get_ql') else 'PostgresSaver'} get_tuple, {key.rsplit('_', 1)[1]} checkpoints", took[key])
        for key in took
        if key.startswith("get_")
    }
    growth_ql = p[f"ql_{HISTORY_LONG}"] / p[f"ql_{HISTORY_SHORT}"]
    growth_pg = p[f"pg_{HISTORY_LONG}"] / p[f"pg_{HISTORY_SHORT}"]
    common.figure(f"get_tuple growth {HISTORY_SHORT} → {HISTORY_LONG}: PostgresSaver", growth_pg, "×", ".2f")
    common.figure(f"get_tuple growth {HISTORY_SHORT} → {HISTORY_LONG}: QuestlogSaver", growth_ql, "×", ".2f")
    common.load_note()
    GOALS.append(("— issue 11 (LangGraph adapter) —", "", "", ""))
    goal("QuestlogSaver put over HTTP vs PostgresSaver put (speed)", put / ql_put, ">=", 0.25)
    ISSUE_20.append(("QuestlogSaver.put over HTTP vs PostgresSaver.put (speed)", put / ql_put, ">=", 0.12))
    goal(f"QuestlogSaver get_tuple growth {HISTORY_SHORT} → {HISTORY_LONG}", growth_ql, "<=", 1.2)
