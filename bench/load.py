"""Load through the HTTP API: N agent threads, each with a keep-alive session and a token of its own,
loop mission → run → (record, operation plan/attempt/complete, checkpoint, heartbeat) × 10 → stop
(every other mission: an approval request instead) → resume for S seconds against the web server,
while a person signed in with a session polls the page of each mission that waits and decides its
approval through the people API (issue 12; `--no-person` leaves the person out). Prints requests/s,
checkpoints/s, p50/p99 per call kind (the person's too), every non-2xx answer (409s counted apart:
expected), and the goals of issue 10 (≥ 300 requests/s, p99 < 100 ms for every call kind, 0 non-2xx
with 8 agents for 60 s) with PASS or MISS; it fails only on errors.

    .venv/bin/python bench/load.py [--agents 8] [--seconds 60] [--url http://host:port --token qlt_…]
    .venv/bin/python bench/load.py --hostile [--hostile-threads 4] [--seconds 20]

--hostile (issue 24): the same agents work twice in one run against the same server, first alone,
then while a hostile agent (a token of its own, several connections at once) sends the largest
requests the input bounds allow, as fast as it is answered: missions with the most constraints,
checkpoints with the most agent-state keys, the largest approval batches, each body just under the
body limit, and receipts of the largest size (which the rate never refuses). Prints the others' p99
in each phase and their ratio, against the goal of at most 2×.

Before the measure, the same load runs for --warmup seconds (10) and the database is vacuumed and
analyzed (`common.vacuum`), as autovacuum keeps a production database: this machine has autovacuum
off, and with statistics taken on empty tables every agent write looked its rows up by sequential
scans over the rows the run had written (400 requests/s against 476 after the warm-up, in one
measure each).

Without --url it starts the server itself (bench/server.py: gunicorn as `make serve` runs it) on
BENCH_DATABASE_URL (default: database questlog_bench_http on 127.0.0.1) and stops it by PID at the
end; without --hostile, with a per-token rate of CAPACITY_API_RATE requests a minute (see there). With --url and without --token, the agents' users and tokens are made in BENCH_DATABASE_URL,
which must then be the server's database. BENCH_QUICK=1 (or --quick): 2 agents for 3 s.
"""

import argparse
import os
import queue
import statistics
import sys
import threading
import time
from collections import Counter

QUICK = os.environ.get("BENCH_QUICK") == "1" or "--quick" in sys.argv
BENCH_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://questlog:questlog@127.0.0.1:5432/questlog_bench_http")
os.environ["DATABASE_URL"] = BENCH_URL

import common  # noqa: E402

common.setup()

import server  # noqa: E402

STEPS = 10  # (record, operation plan/attempt/complete, checkpoint, heartbeat) per run
GOAL_RATE, GOAL_P99_MS = 300.0, 100.0
# The per-token rate of the server this measure starts (QUESTLOG_API_RATE, unless set), in requests
# a minute. The agents here send their next request as soon as the last is answered, and how fast
# one goes depends on the worker its connection landed on: in one run of three at 439 requests/s, one
# agent was refused from second 54 of a clock minute on, so it had sent the default rate's 6,000
# requests in that minute (over 110 a second; the busiest agent of an even run sends 55), and 2,041
# 429s followed, its loop starting mission after mission. No agent that waits on a model comes near
# that rate. Every request is still counted against this one (the throttle's work is measured): only
# its threshold is out of the way. --hostile keeps the default: there the throttle is measured.
CAPACITY_API_RATE = 60_000


PERSON, PERSON_PASSWORD = "person", "bench-person-password"
# What agents hand the person: (mission id, approval id) of a mission waiting for a decision.
Waiting = queue.Queue[tuple[int, int]]


class Person:
    """The person: for each mission that waits, polls its page until the approval shows, then
    decides it through the people API. Every call is timed by kind, like an agent's."""

    def __init__(self, url: str, username: str, password: str) -> None:
        from questlog_client.errors import ApiError
        from questlog_client.people import PersonSession

        self.api_error = ApiError
        self.session = PersonSession(url, username, password)
        self.times: dict[str, list[float]] = {}
        self.failures: list[str] = []
        self.conflicts = 0

    def timed(self, kind: str, call):
        start = time.perf_counter()
        try:
            return call()
        except self.api_error as exc:
            if exc.status == 409:
                self.conflicts += 1  # decided or expired meanwhile: expected, and nothing was lost
            else:
                self.failures.append(f"{kind}: {exc}")
            return None
        finally:
            self.times.setdefault(kind, []).append(time.perf_counter() - start)

    def page(self, kind: str, path: str) -> None:
        response = self.timed(kind, lambda: self.session.page(path))
        if response is not None and response.status_code != 200:
            self.failures.append(f"{kind} GET {path}: {response.status_code}")

    def work(self, waiting: Waiting, deadline: float) -> None:
        while time.monotonic() < deadline:
            self.page("page: inbox", "/approvals/")
            try:
                mission_id, approval_id = waiting.get(timeout=0.2)
            except queue.Empty:
                continue
            self.page("page: mission", f"/missions/{mission_id}/")
            self.timed("decide approval", lambda: self.session.call("POST", f"approvals/{approval_id}/decision", {"decision": "approve"}))

    def close(self) -> None:
        self.session.close()


def agent_loop(agent: server.Agent, seed: int, deadline: float, waiting: Waiting | None = None) -> None:
    """One agent's work until the deadline; the call under way when it passes is finished."""
    missions = 0
    while time.monotonic() < deadline:
        started = agent.start(f"load {seed}-{missions}")
        missions += 1
        if started is None:
            continue
        mission_id, run_id = started
        state = common.AgentState(keys=20, key_bytes=500, seed=seed * 1000 + missions)
        for step in range(STEPS):
            if time.monotonic() >= deadline:
                return
            agent.call("record", "POST", f"runs/{run_id}/records", {"kind": "note", "text": f"step {step}: checked the venue list", "key": server.key()})
            op = agent.call(
                "operation plan",
                "POST",
                f"runs/{run_id}/operations",
                {"key": f"email-{step}", "kind": "email.send", "target": f"venue-{step}@example.com", "request": {"subject": "Quote for 12?"}},
            )
            if op is not None:
                agent.call("operation attempt", "POST", f"operations/{op['id']}/attempt")
                agent.call("operation complete", "POST", f"operations/{op['id']}/complete", {"external_id": f"msg-{step}", "external_status": "sent"})
            agent.checkpoint(run_id, state.next()[0])
            agent.call("heartbeat", "POST", f"runs/{run_id}/heartbeat")
        if time.monotonic() >= deadline:
            return
        if waiting is not None and missions % 2:
            asked = agent.call(
                "approval request",
                "POST",
                f"runs/{run_id}/approvals",
                {"action": "send the quote requests", "payload": {"venues": STEPS}, "reason": "They go to outside suppliers.", "key": server.key()},
            )
            if asked is not None:
                waiting.put((mission_id, asked["id"]))
        else:
            agent.call("stop", "POST", f"runs/{run_id}/stop", {"reason": "completed"})
        agent.call("resume", "GET", f"missions/{mission_id}/resume")


def filler(total_bytes: int, items: int, overhead: int, longest: int | None = None) -> str:
    """Text for each of `items` items so that they take about `total_bytes` together, none longer
    than `longest` (a field's own limit, which the server checks too)."""
    size = max(1, total_bytes // items - overhead)
    return "x" * (size if longest is None else min(size, longest))


def hostile_loop(agent: server.Agent, deadline: float) -> None:
    """The largest requests the bounds allow, one after the other until the deadline. What it is
    answered is timed under its own kinds and kept apart from the others'."""
    from django.conf import settings

    from quests import limits

    body = settings.QUESTLOG_MAX_BODY_BYTES - 4096  # under the limit (as the server reads it too), with room for the rest
    constraints = [filler(body, limits.MISSION_CONSTRAINTS_MAX, 4, limits.CONSTRAINT_TEXT)] * limits.MISSION_CONSTRAINTS_MAX
    agent_state = {f"k{i:04d}": filler(body, limits.OBJECT_KEYS_MAX, 12) for i in range(limits.OBJECT_KEYS_MAX)}
    batch = [{"action": "pay", "payload": {"memo": filler(body, limits.APPROVAL_BATCH_ITEMS_MAX, 80)}, "reason": "r"}] * limits.APPROVAL_BATCH_ITEMS_MAX
    receipt = {"body": "x" * (limits.RECEIPT_BYTES_MAX - 16)}
    n = 0
    while time.monotonic() < deadline:
        n += 1
        mission = agent.call("hostile: mission", "POST", "missions", {"title": f"hostile {n}", "objective": "o", "constraints": constraints})
        if mission is None:
            continue
        started = agent.call("hostile: run", "POST", f"missions/{mission['id']}/runs", {"agent": "hostile"})
        if started is None:
            continue
        run_id = started["run"]["id"]
        agent.call("hostile: checkpoint", "POST", f"runs/{run_id}/checkpoints", {"agent_state": agent_state})
        op = agent.call("hostile: operation", "POST", f"runs/{run_id}/operations", {"key": "k", "kind": "k", "target": "t", "request": {}})
        if op is not None:
            for i in range(10):
                agent.call("hostile: receipt", "POST", f"operations/{op['id']}/observe", {"external_status": f"s{i}", "receipt": receipt})
        agent.call("hostile: approvals", "POST", f"runs/{run_id}/approvals/batch", {"items": batch})


def run_load(url: str, tokens: list[str], seconds: float, *, person: bool, hostile: str | None = None, hostile_threads: int = 0) -> tuple[list, float, list]:
    """The agents (and the person, last in the first list answered) until the deadline; with a
    `hostile` token, that agent too (its connections are the last list answered)."""
    agents = [server.Agent(url, token) for token in tokens]
    hostiles = [server.Agent(url, hostile) for _ in range(hostile_threads)] if hostile else []
    someone = Person(url, common.USER_PREFIX + PERSON, PERSON_PASSWORD) if person else None
    waiting: Waiting | None = queue.Queue() if person else None
    errors: list[BaseException] = []

    def work(target, *args) -> None:
        try:
            target(*args)
        except BaseException as exc:  # reported after the run: a transport error is an error, not a MISS
            errors.append(exc)

    start = time.monotonic()
    deadline = start + seconds
    threads = [threading.Thread(target=work, args=(agent_loop, a, i, deadline, waiting)) for i, a in enumerate(agents)]
    if someone is not None:
        threads.append(threading.Thread(target=work, args=(someone.work, waiting, deadline)))
    threads += [threading.Thread(target=work, args=(hostile_loop, h, deadline)) for h in hostiles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    for agent in agents + hostiles:
        agent.close()
    if someone is not None:
        someone.close()
    if errors:
        raise RuntimeError(f"{len(errors)} thread(s) failed; the first: {errors[0]!r}") from errors[0]
    return agents + ([someone] if someone is not None else []), elapsed, hostiles


def p99(samples: list[float]) -> float:
    return common.percentile(samples, 99) if len(samples) > 1 else samples[0]


def report(agents: list, elapsed: float, seconds: float) -> None:
    times: dict[str, list[float]] = {}
    for agent in agents:
        for kind, samples in agent.times.items():
            times.setdefault(kind, []).extend(samples)
    total = sum(len(s) for s in times.values())
    rate = total / elapsed
    people = [a for a in agents if isinstance(a, Person)]
    count = len(agents) - len(people)
    print(f"\n== {count} agents{' and a person' if people else ''} for {seconds:.0f} s through the HTTP API (make serve, workers: {server.WORKERS})")
    common.figure("requests", total, fmt="d")
    common.figure("requests/s", rate)
    common.figure("checkpoints/s", len(times.get("checkpoint", [])) / elapsed)
    busiest = max((sum(map(len, a.times.values())) for a in agents if not isinstance(a, Person)), default=0)
    common.figure("the busiest agent's requests/s", busiest / elapsed)
    worst = 0.0
    for kind in sorted(times, key=lambda k: -len(times[k])):
        samples = times[kind]
        worst = max(worst, p99(samples) * 1000)
        common.figure(f"{kind:<18}", f"{len(samples):6d} calls, p50 {statistics.median(samples) * 1000:7.1f} ms, p99 {p99(samples) * 1000:7.1f} ms")
    failures = [f for agent in agents for f in agent.failures]
    if people:
        common.figure("approvals decided by the person", len(people[0].times.get("decide approval", [])), fmt="d")
        common.figure("expected 409s (decided meanwhile)", people[0].conflicts, fmt="d")
    common.figure("non-2xx answers", len(failures), fmt="d")
    for failure, count in Counter(failures).most_common():
        print(f"  {count} × {failure}")
    common.load_note()
    verdict = lambda ok: "PASS" if ok else "MISS"  # noqa: E731
    common.table(
        "Goals of issues 10 and 20 (bench/load.py; set for 8 agents, 60 s)",
        [
            ("requests/s", f"{rate:.0f}", f"≥ {GOAL_RATE:.0f}  {verdict(rate >= GOAL_RATE)}"),
            ("worst p99 of a call kind", f"{worst:.1f} ms", f"< {GOAL_P99_MS:.0f} ms  {verdict(worst < GOAL_P99_MS)}"),
            ("non-2xx answers", str(len(failures)), f"0  {verdict(not failures)}"),
        ],
    )


def all_times(callers: list) -> list[float]:
    return [t for caller in callers for samples in caller.times.values() for t in samples]


def report_hostile(calm: list, calm_elapsed: float, attacked: list, attacked_elapsed: float, hostiles: list, seconds: float) -> None:
    """The others' latency alone and under a hostile agent, in one table with their ratio."""
    print(f"\n== The others alone, then with a hostile agent ({len(hostiles)} connections), {seconds:.0f} s each (workers: {server.WORKERS})")
    rows = []
    p99s = []
    for name, callers, elapsed in (("alone", calm, calm_elapsed), ("with the hostile agent", attacked, attacked_elapsed)):
        samples = all_times(callers)
        p99s.append(p99(samples) * 1000)
        failures = [f for c in callers for f in c.failures]
        common.figure(
            f"others {name}",
            f"{len(samples)} calls, {len(samples) / elapsed:.0f} requests/s, p50 {statistics.median(samples) * 1000:.1f} ms, p99 {p99s[-1]:.1f} ms, non-2xx {len(failures)}",
        )
        for failure, count in Counter(failures).most_common(5):
            print(f"  {count} × {failure}")
        rows.append((f"others' p99 {name}", f"{p99s[-1]:.1f} ms", ""))
    hostile_times: dict[str, list[float]] = {}
    for h in hostiles:
        for kind, samples in h.times.items():
            hostile_times.setdefault(kind, []).extend(samples)
    for kind, samples in sorted(hostile_times.items()):
        common.figure(f"{kind:<20}", f"{len(samples):5d} calls, p50 {statistics.median(samples) * 1000:7.1f} ms, p99 {p99(samples) * 1000:7.1f} ms")
    hostile_failures = [f for h in hostiles for f in h.failures]
    common.figure("hostile non-2xx answers", len(hostile_failures), fmt="d")
    for failure, count in Counter(f[:160] for f in hostile_failures).most_common(5):
        print(f"  {count} × {failure}")
    common.load_note()
    ratio = p99s[1] / p99s[0]
    rows.append(("ratio", f"{ratio:.2f}×", f"≤ 2×  {'PASS' if ratio <= 2 else 'MISS'}"))
    common.table("Goal of issue 24: the others' p99 with a hostile agent (bench/load.py --hostile)", rows)


def person_tokens(count: int) -> list[str]:
    """The person's user (with a password, to sign in) and a token of theirs for each agent: the
    person sees and decides what the agents ask."""
    from quests.services.tokens import token_create

    user = common.bench_user(PERSON)
    user.set_password(PERSON_PASSWORD)
    user.save(update_fields=["password"])
    return [token_create(user=user, name=f"agent{i}")[1] for i in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=2 if QUICK else 8)
    parser.add_argument("--seconds", type=float, default=3 if QUICK else 60)
    parser.add_argument("--url", help="an already running server (default: start one)")
    parser.add_argument("--token", help="an agent token for --url (default: one per agent, made in BENCH_DATABASE_URL)")
    parser.add_argument("--quick", action="store_true", help="as BENCH_QUICK=1")
    parser.add_argument("--warmup", type=float, default=1 if QUICK else 10, help="seconds of the same load before the measure (default 10)")
    parser.add_argument("--no-person", action="store_true", help="agents only: no person polling pages and deciding approvals")
    parser.add_argument("--hostile", action="store_true", help="the agents alone, then with a hostile agent sending the largest requests allowed")
    parser.add_argument("--hostile-threads", type=int, default=4, help="connections the hostile agent uses at once")
    args = parser.parse_args()
    print(f"HTTP load{' (quick mode)' if QUICK else ''}, database {BENCH_URL.rsplit('/', 1)[-1]}")
    with common.bench_data():
        person = not args.no_person and not args.token
        tokens = (
            [args.token] * args.agents
            if args.token
            else person_tokens(args.agents)
            if person
            else [server.agent_token(f"agent{i}") for i in range(args.agents)]
        )
        hostile = server.agent_token("hostile") if args.hostile else None
        if not hostile:
            os.environ.setdefault("QUESTLOG_API_RATE", str(CAPACITY_API_RATE))  # the server's: see CAPACITY_API_RATE
        web = server.Server(url=args.url.rstrip("/")) if args.url else server.start_server(BENCH_URL)
        try:
            with common.phase(f"warm-up: the same load for {args.warmup:g} s, then vacuum and analyze"):
                run_load(web.url, tokens, args.warmup, person=person)
                common.vacuum()
            agents, elapsed, _ = run_load(web.url, tokens, args.seconds, person=person)
            if hostile:
                attacked, attacked_elapsed, hostiles = run_load(
                    web.url, tokens, args.seconds, person=person, hostile=hostile, hostile_threads=args.hostile_threads
                )
        finally:
            web.stop()
    if hostile:
        report_hostile(agents, elapsed, attacked, attacked_elapsed, hostiles, args.seconds)
    else:
        report(agents, elapsed, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
