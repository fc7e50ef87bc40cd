"""LangGraph's InMemorySaver as the reference the parity tests hold QuestlogSaver to, with the two
whole-thread operations it lacks (`copy_thread`, `prune`) written as the base class documents them,
and the comparisons of what both savers answer."""

from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver


class ReferenceSaver(InMemorySaver):
    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Every checkpoint, write and blob of the source, under the target's id."""
        for ns, checkpoints in self.storage.get(source_thread_id, {}).items():
            self.storage[target_thread_id][ns].update(checkpoints)
        for (thread_id, ns, checkpoint_id), writes in list(self.writes.items()):
            if thread_id == source_thread_id:
                self.writes[(target_thread_id, ns, checkpoint_id)].update(writes)
        for (thread_id, ns, channel, version), blob in list(self.blobs.items()):
            if thread_id == source_thread_id:
                self.blobs[(target_thread_id, ns, channel, version)] = blob

    def prune(self, thread_ids: Iterable[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: each namespace keeps its newest checkpoint and its writes; `delete`: every
        checkpoint, write and stored value goes."""
        for thread_id in thread_ids:
            for ns, checkpoints in self.storage.get(thread_id, {}).items():
                keep = {max(checkpoints)} if checkpoints and strategy == "keep_latest" else set()
                for checkpoint_id in set(checkpoints) - keep:
                    del checkpoints[checkpoint_id]
                    self.writes.pop((thread_id, ns, checkpoint_id), None)
            if strategy == "delete":
                for key in [key for key in self.blobs if key[0] == thread_id]:
                    del self.blobs[key]


def plain(item: CheckpointTuple | None) -> Any:
    """A checkpoint tuple as comparable data (its configs reduced to what identifies a checkpoint)."""
    if item is None:
        return None
    return {
        "config": _ids(item.config),
        "checkpoint": item.checkpoint,
        "metadata": item.metadata,
        "parent_config": _ids(item.parent_config),
        "pending_writes": item.pending_writes,
    }


def _ids(config: dict | None) -> Any:
    if config is None:
        return None
    configurable = config["configurable"]
    return (configurable["thread_id"], configurable.get("checkpoint_ns", ""), configurable.get("checkpoint_id"))


def plain_list(items: Iterable[CheckpointTuple], *, ordered: bool) -> list[Any]:
    """A listing as comparable data. Across namespaces (or threads) InMemorySaver walks its dicts
    namespace by namespace while PostgresSaver and QuestlogSaver sort every checkpoint newest first:
    there only the set of tuples is compared."""
    found = [plain(item) for item in items]
    return found if ordered else sorted(found, key=repr)
