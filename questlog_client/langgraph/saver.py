"""`QuestlogSaver`: a LangGraph checkpointer that keeps a graph's threads as Questlog missions.

    saver = QuestlogSaver("http://127.0.0.1:8000", token)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"request": "Plan the offsite"}, config)        # stops at interrupt(...)
    graph.invoke(saver.resume_command(config), config)           # once a person decided

Every checkpoint is a Questlog checkpoint of the thread's mission; only the channels LangGraph says
changed travel (`new_versions`); an `interrupt()` becomes an approval in the person's inbox; a node's
side effect goes through the operation ledger (`saver.operation`). The async methods run the sync
ones in a worker thread: the event loop is never blocked, and there is one code path to trust."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any
from urllib.parse import urlencode

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import INTERRUPT

from questlog_client import errors
from questlog_client.core import Connection
from questlog_client.langgraph import codec, reviews

PAGE = 100
MISSION_KEY = reviews.MISSION_KEY


class QuestlogSaver(BaseCheckpointSaver[str], reviews.Reviews):
    """A full LangGraph checkpointer (sync and async) over Questlog's HTTP API, with an agent token."""

    def __init__(
        self,
        base_url: str = "",
        token: str = "",
        *,
        serde: SerializerProtocol | None = None,
        connection: Connection | None = None,
        **options: Any,
    ) -> None:
        """Talk to `base_url` with an agent `token`, or through an existing `connection` (a
        `questlog_client.Questlog`: one connection for the graph and the agent's own calls)."""
        super().__init__(serde=serde)
        if connection is None and not (base_url and token):
            raise ValueError("QuestlogSaver needs the server's URL and an agent token, or a connection.")
        self._own_connection = connection is None
        self.connection = connection or Connection(base_url, token, **options)

    def close(self) -> None:
        if self._own_connection:
            self.connection.close()

    def __enter__(self) -> QuestlogSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- calls ---------------------------------------------------------------------------------

    def _get(self, path: str, **query: Any) -> Any:
        params = {key: value for key, value in query.items() if value is not None}
        return self.connection.request("GET", f"{path}?{urlencode(params)}" if params else path)[1]

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        # Every write here is idempotent on the server (a checkpoint id saved twice is saved once,
        # a task's writes are kept per index), so a lost answer may be retried.
        return self.connection.request("POST", path, body, idempotent=True)[1]

    # --- reading -------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        items = self._get(
            "langgraph/checkpoints", thread_id=str(configurable["thread_id"]), checkpoint_ns=configurable.get("checkpoint_ns", ""),
            checkpoint_id=get_checkpoint_id(config), limit=1,
        )["items"]
        return self._tuple(items[0]) if items else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        configurable = (config or {}).get("configurable", {})
        query = {
            "thread_id": str(configurable["thread_id"]) if configurable.get("thread_id") is not None else None,
            "checkpoint_ns": configurable.get("checkpoint_ns"),
            "checkpoint_id": configurable.get("checkpoint_id"),
            "filter": codec.json_text(filter) if filter else None,
        }
        cursor = get_checkpoint_id(before) if before else None
        remaining = limit
        while remaining is None or remaining > 0:
            page = min(PAGE, remaining) if remaining is not None else PAGE
            items = self._get("langgraph/checkpoints", **query, before=cursor, limit=page)["items"]
            for item in items:
                yield self._tuple(item)
            if remaining is not None:
                remaining -= len(items)
            if len(items) < page:
                return
            cursor = items[-1]["checkpoint_id"]

    def _tuple(self, item: dict[str, Any]) -> CheckpointTuple:
        thread_id, ns = item["thread_id"], item["checkpoint_ns"]
        checkpoint = codec.decode_fields(self.serde, item["checkpoint"])
        checkpoint["channel_values"] = {
            name: codec.decode(self.serde, value) for name, value in item["channel_values"].items() if not codec.is_empty(value)
        }
        writes = sorted(item["pending_writes"], key=lambda w: writes_sort_key(w.get("task_path", ""), w["task_id"], w.get("idx", 0)))
        parent = item.get("parent_checkpoint_id")
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": item["checkpoint_id"]}},
            checkpoint=checkpoint,
            metadata=codec.decode_fields(self.serde, item["metadata"]),
            parent_config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None,
            pending_writes=[(w["task_id"], w["channel"], codec.decode(self.serde, w["value"])) for w in writes],
        )

    # --- writing -------------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        values = checkpoint.get("channel_values") or {}
        skeleton = {key: value for key, value in checkpoint.items() if key != "channel_values"}
        channels = {
            name: {"version": str(version), "value": codec.encode(self.serde, values[name]) if name in values else {"type": codec.EMPTY}}
            for name, version in new_versions.items()
        }
        body = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint": codec.encode_fields(self.serde, skeleton),
            "metadata": codec.encode_fields(self.serde, get_checkpoint_metadata(config, metadata)),
            "parent_checkpoint_id": configurable.get("checkpoint_id"),
            "channels": channels,
            "title": codec.first_text(values) if metadata.get("source") == "input" else "",
            "mission_id": configurable.get(MISSION_KEY),
        }
        self._post("langgraph/checkpoints", body)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        encoded = [
            {"idx": WRITES_IDX_MAP.get(channel, idx), "channel": channel, "value": codec.encode(self.serde, value)}
            for idx, (channel, value) in enumerate(writes)
        ]
        interrupts = [
            {**asked, **reviews.asked_where(task_path, writes)}
            for channel, value in writes if channel == INTERRUPT for asked in reviews.approvals_asked(value)
        ]
        body = {
            "thread_id": thread_id,
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": configurable["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": encoded,
            "interrupts": interrupts,
            "title": codec.first_text([value for channel, value in writes if channel == "__start__"]),
            "mission_id": configurable.get(MISSION_KEY),
        }
        self._post("langgraph/writes", body)

    def delete_thread(self, thread_id: str) -> None:
        self._post("langgraph/threads/delete", {"thread_id": str(thread_id)})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            self._post("langgraph/delete-for-runs", {"run_ids": [str(run_id) for run_id in run_ids]})

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._post("langgraph/copy", {"source_thread_id": str(source_thread_id), "target_thread_id": str(target_thread_id)})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if thread_ids:
            self._post("langgraph/prune", {"thread_ids": [str(t) for t in thread_ids], "strategy": strategy})

    def get_next_version(self, current: str | int | float | None, channel: None = None) -> str:
        """Versions that sort as text and as numbers: a zero-padded counter, then a random part so
        two writers of one version never produce the same string."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032d}.{secrets.randbelow(10**16):016d}"

    # --- async: the same calls, off the event loop ---------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        pages = self.list(config, filter=filter, before=before, limit=limit)
        done = object()
        while (item := await asyncio.to_thread(next, pages, done)) is not done:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


__all__ = ["QuestlogSaver", "errors"]
