"""Where a checkpoint POSTed over HTTP spends its time: inside the gunicorn worker (its access log's
%(D)s, from the request parsed to the response written) against the agent's wall time, the rest
being the client, the socket and gunicorn's own parsing. Starts the server as `make serve` does.

    BENCH_DATABASE_URL=… .venv/bin/python bench/profile_http.py [N]"""

import os
import statistics
import sys
import time

# gunicorn reads extra arguments from the environment: an access log line of microseconds alone.
os.environ["GUNICORN_CMD_ARGS"] = "--access-logformat=%(D)s"

import common  # noqa: E402

common.setup()

import server  # noqa: E402

N = int(next((a for a in sys.argv[1:] if a.isdigit()), "300"))
WARMUP = 30


def with_access_log(popen):
    """server.start_server turns the access log off for the benchmarks; this run needs it."""

    def start(*args, env=None, **kwargs):
        return popen(*args, env={**(env or {}), "QUESTLOG_WEB_ACCESS_LOG": "1"}, **kwargs)

    return start


def main() -> None:
    server.subprocess.Popen = with_access_log(server.subprocess.Popen)
    web = server.start_server(common.BENCH_DATABASE_URL)
    try:
        agent = server.Agent(web.url, server.agent_token(f"profile-http-{os.getpid()}"))
        started = agent.start("profile http")
        assert started, "the mission and run could not be made"
        state = common.AgentState(keys=20, key_bytes=500, seed=3)
        took = []
        for _ in range(WARMUP + N):
            agent_state, _ = state.next()
            start = time.perf_counter()
            agent.checkpoint(started[1], agent_state)
            took.append(time.perf_counter() - start)
        agent.close()
    finally:
        web.stop()
    assert web.log is not None
    in_worker = [int(line) / 1e6 for line in web.log.read_text().splitlines() if line.strip().isdigit()][-N:]
    wall, worker = statistics.median(took[WARMUP:]), statistics.median(in_worker)
    print(
        f"checkpoint POST, {N} calls after {WARMUP}: agent wall p50 {wall * 1000:.2f} ms, in the gunicorn worker p50 {worker * 1000:.2f} ms, outside it {(wall - worker) * 1000:.2f} ms"
    )
    common.load_note()


if __name__ == "__main__":
    main()
