"""Measuring LangGraph checkpointers the way bench/bench_vs_langgraph.py does: a thread driven as
LangGraph's loop drives a checkpointer, paths timed in alternating rounds, goals with PASS or MISS.
Its own module so that the benchmark script keeps to its paths and its figures."""

import statistics
import time
from collections.abc import Callable

import common
from langgraph.checkpoint.base import BaseCheckpointSaver, create_checkpoint, empty_checkpoint

# Every benchmark thread's id starts so: the script removes them all before and after a run.
THREAD_PREFIX = "bench-lg-"


class Thread:
    """A LangGraph thread: checkpoints built as the Pregel loop builds them (create_checkpoint from
    the previous one, the changed channel's version bumped by the saver's get_next_version)."""

    def __init__(self, saver: BaseCheckpointSaver, name: str) -> None:
        self.saver = saver
        self.config = {"configurable": {"thread_id": THREAD_PREFIX + name, "checkpoint_ns": ""}}
        self.checkpoint = empty_checkpoint()
        self.step = -1

    def put(self, state: dict, changed: str) -> float:
        """Seconds spent in `put` itself (building the checkpoint is the caller's work in LangGraph too)."""
        self.step += 1
        checkpoint = create_checkpoint(self.checkpoint, None, self.step)
        versions = dict(checkpoint["channel_versions"])
        new = {k: self.saver.get_next_version(versions.get(k), None) for k in (state if self.step == 0 else [changed])}
        versions.update(new)
        checkpoint["channel_values"], checkpoint["channel_versions"] = dict(state), versions
        metadata = {"source": "loop", "step": self.step, "parents": {}}
        start = time.perf_counter()
        self.config = self.saver.put(self.config, checkpoint, metadata, new)
        took = time.perf_counter() - start
        self.checkpoint = checkpoint
        return took

    def get_tuple(self) -> None:
        latest = {"configurable": {k: v for k, v in self.config["configurable"].items() if k != "checkpoint_id"}}
        assert self.saver.get_tuple(latest) is not None


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rounds(paths: dict[str, Callable[[], float]], *, count: int, samples: int) -> dict[str, list[float]]:
    """Each round runs `samples` of every path, starting one path later than the round before."""
    names = list(paths)
    took: dict[str, list[float]] = {name: [] for name in names}
    for r in range(count):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            took[name] += [paths[name]() for _ in range(samples)]
    return took


def show(label: str, samples: list[float]) -> float:
    p50 = statistics.median(samples) * 1000
    common.figure(label, f"p50 {p50:.2f} ms, p95 {common.percentile(samples, 95) * 1000:.2f} ms, {len(samples) / sum(samples):.0f}/s ({len(samples)} samples)")
    return p50


GOALS: list[tuple[str, str, str, str]] = []
# Issue 20's goals, gathered as (label, ratio, op, target) while the paths run, printed at the end.
ISSUE_20: list[tuple[str, float, str, float]] = []


def goal(label: str, ratio: float, op: str, target: float) -> None:
    met = ratio >= target if op == ">=" else ratio <= target
    verdict = "PASS" if met else "MISS"
    GOALS.append((label, f"{ratio:.2f}×", f"{'≥' if op == '>=' else '≤'} {target}×".ljust(8), verdict))
