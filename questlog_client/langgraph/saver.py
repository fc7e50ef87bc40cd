"""`QuestlogSaver`: a LangGraph checkpointer that keeps a graph's threads as Questlog missions.

    saver = QuestlogSaver("http://127.0.0.1:8000", token)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"request": "Plan the offsite"}, config)        # stops at interrupt(...)
    graph.invoke(saver.resume_command(config), config)           # once a person decided

Every checkpoint is a Questlog checkpoint of the thread's mission; only the channels LangGraph says
changed travel (`new_versions`); an `interrupt()` becomes an approval in the person's inbox; a node's
side effect goes through the operation ledger (`saver.operation`). The async methods make the same
requests (one code path builds them and reads the answers) on an `httpx.AsyncClient` with the same
retries: the event loop is never blocked, and no worker thread is used."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlencode

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import INTERRUPT

from questlog_client import errors
from questlog_client.core import AsyncConnection, Connection
from questlog_client.langgraph import codec, reviews

PAGE = 100
CHECKPOINTS = "langgraph/checkpoints"
WRITES = "langgraph/writes"
DELTA_HISTORY = "langgraph/delta-history"
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
        self.async_connection = AsyncConnection(self.connection)

    def close(self) -> None:
        if self._own_connection:
            self.connection.close()

    def __enter__(self) -> QuestlogSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> QuestlogSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.async_connection.aclose()
        self.close()

    # --- calls ---------------------------------------------------------------------------------

    def _get(self, path: str, **query: Any) -> Any:
        return self.connection.request("GET", _with_query(path, query))[1]

    async def _aget(self, path: str, **query: Any) -> Any:
        return (await self.async_connection.arequest("GET", _with_query(path, query)))[1]

    # Every write here is idempotent on the server (a checkpoint id saved twice is saved once,
    # a task's writes are kept per index), so a lost answer may be retried.
    def _post(self, path: str, body: dict[str, Any]) -> Any:
        return self.connection.request("POST", path, body, idempotent=True)[1]

    async def _apost(self, path: str, body: dict[str, Any]) -> Any:
        return (await self.async_connection.arequest("POST", path, body, idempotent=True))[1]

    # --- reading -------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._first(self._get(CHECKPOINTS, **_tuple_query(config)))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._first(await self._aget(CHECKPOINTS, **_tuple_query(config)))

    def list(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None, before: RunnableConfig | None = None, limit: int | None = None
    ) -> Iterator[CheckpointTuple]:
        pages = _Pages(config, filter, before, limit)
        while (query := pages.next_query()) is not None:
            yield from map(self._tuple, pages.took(self._get(CHECKPOINTS, **query)["items"]))

    async def alist(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None, before: RunnableConfig | None = None, limit: int | None = None
    ) -> AsyncIterator[CheckpointTuple]:
        pages = _Pages(config, filter, before, limit)
        while (query := pages.next_query()) is not None:
            for item in pages.took((await self._aget(CHECKPOINTS, **query))["items"]):
                yield self._tuple(item)

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """One request, whatever the number of ancestors (the base class asks for each in turn)."""
        if not channels:
            return {}
        return self._delta(self._get(DELTA_HISTORY, **_delta_query(config, channels)))

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        return self._delta(await self._aget(DELTA_HISTORY, **_delta_query(config, channels)))

    def _first(self, answer: dict[str, Any]) -> CheckpointTuple | None:
        items = answer["items"]
        return self._tuple(items[0]) if items else None

    def _tuple(self, item: dict[str, Any]) -> CheckpointTuple:
        thread_id, ns = item["thread_id"], item["checkpoint_ns"]
        checkpoint = codec.decode_fields(self.serde, item["checkpoint"])
        checkpoint["channel_values"] = {name: codec.decode(self.serde, value) for name, value in item["channel_values"].items() if not codec.is_empty(value)}
        writes = sorted(item["pending_writes"], key=lambda w: writes_sort_key(w.get("task_path", ""), w["task_id"], w.get("idx", 0)))
        parent = item.get("parent_checkpoint_id")
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": item["checkpoint_id"]}},
            # Decoded from the JSON the saver wrote from these TypedDicts.
            checkpoint=cast(Checkpoint, checkpoint),
            metadata=cast(CheckpointMetadata, codec.decode_fields(self.serde, item["metadata"])),
            parent_config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None,
            pending_writes=[(w["task_id"], w["channel"], codec.decode(self.serde, w["value"])) for w in writes],
        )

    def _delta(self, answer: dict[str, Any]) -> dict[str, DeltaChannelHistory]:
        found: dict[str, DeltaChannelHistory] = {}
        for name, item in answer["channels"].items():
            found[name] = {"writes": [(w["task_id"], w["channel"], codec.decode(self.serde, w["value"])) for w in item["writes"]]}
            if item.get("seed") is not None:
                found[name]["seed"] = codec.decode(self.serde, item["seed"])
        return found

    # --- writing -------------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        body = self._checkpoint_body(config, checkpoint, metadata, new_versions)
        self._post(CHECKPOINTS, body)
        return _saved(body)

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        body = self._checkpoint_body(config, checkpoint, metadata, new_versions)
        await self._apost(CHECKPOINTS, body)
        return _saved(body)

    def _checkpoint_body(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> dict[str, Any]:
        configurable = config["configurable"]
        values = checkpoint.get("channel_values") or {}
        skeleton = {key: value for key, value in checkpoint.items() if key != "channel_values"}
        channels = {
            name: {"version": str(version), "value": codec.encode(self.serde, values[name]) if name in values else {"type": codec.EMPTY}}
            for name, version in new_versions.items()
        }
        return {
            "thread_id": str(configurable["thread_id"]),
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint": codec.encode_fields(self.serde, skeleton),
            "metadata": codec.encode_fields(self.serde, get_checkpoint_metadata(config, metadata)),
            "parent_checkpoint_id": configurable.get("checkpoint_id"),
            "channels": channels,
            "title": codec.first_text(values) if metadata.get("source") == "input" else "",
            "mission_id": configurable.get(MISSION_KEY),
        }

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        self._post(WRITES, self._writes_body(config, writes, task_id, task_path))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await self._apost(WRITES, self._writes_body(config, writes, task_id, task_path))

    def _writes_body(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str) -> dict[str, Any]:
        configurable = config["configurable"]
        encoded = [
            {"idx": WRITES_IDX_MAP.get(channel, idx), "channel": channel, "value": codec.encode(self.serde, value)}
            for idx, (channel, value) in enumerate(writes)
        ]
        interrupts = [
            {**asked, **reviews.asked_where(task_path, writes)} for channel, value in writes if channel == INTERRUPT for asked in reviews.approvals_asked(value)
        ]
        return {
            "thread_id": str(configurable["thread_id"]),
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": configurable["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": encoded,
            "interrupts": interrupts,
            "title": codec.first_text([value for channel, value in writes if channel == "__start__"]),
            "mission_id": configurable.get(MISSION_KEY),
        }

    def delete_thread(self, thread_id: str) -> None:
        self._post("langgraph/threads/delete", {"thread_id": str(thread_id)})

    async def adelete_thread(self, thread_id: str) -> None:
        await self._apost("langgraph/threads/delete", {"thread_id": str(thread_id)})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            self._post("langgraph/delete-for-runs", {"run_ids": [str(run_id) for run_id in run_ids]})

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            await self._apost("langgraph/delete-for-runs", {"run_ids": [str(run_id) for run_id in run_ids]})

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._post("langgraph/copy", {"source_thread_id": str(source_thread_id), "target_thread_id": str(target_thread_id)})

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._apost("langgraph/copy", {"source_thread_id": str(source_thread_id), "target_thread_id": str(target_thread_id)})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if thread_ids:
            self._post("langgraph/prune", {"thread_ids": [str(t) for t in thread_ids], "strategy": strategy})

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if thread_ids:
            await self._apost("langgraph/prune", {"thread_ids": [str(t) for t in thread_ids], "strategy": strategy})

    def get_next_version(self, current: str | int | float | None, channel: None = None) -> str:
        """Versions that sort as text and as numbers: a zero-padded counter, then a random part so
        two writers of one version never produce the same string."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032d}.{secrets.randbelow(10**16):016d}"


def _with_query(path: str, query: dict[str, Any]) -> str:
    params = {key: value for key, value in query.items() if value is not None}
    return f"{path}?{urlencode(params, doseq=True)}" if params else path


def _tuple_query(config: RunnableConfig) -> dict[str, Any]:
    configurable = config["configurable"]
    return {
        "thread_id": str(configurable["thread_id"]),
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": get_checkpoint_id(config),
        "limit": 1,
    }


def _delta_query(config: RunnableConfig, channels: Sequence[str]) -> dict[str, Any]:
    configurable = config["configurable"]
    return {
        "thread_id": str(configurable["thread_id"]),
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": get_checkpoint_id(config),
        "channel": list(channels),
    }


def _saved(body: dict[str, Any]) -> RunnableConfig:
    return {"configurable": {"thread_id": body["thread_id"], "checkpoint_ns": body["checkpoint_ns"], "checkpoint_id": body["checkpoint"]["id"]}}


class _Pages:
    """The requests of one `list`: pages of at most PAGE tuples, newest first, each one starting
    after the oldest of the page before, until `limit` or a short page."""

    def __init__(self, config: RunnableConfig | None, filter: dict[str, Any] | None, before: RunnableConfig | None, limit: int | None) -> None:
        configurable = (config or {}).get("configurable", {})
        self.query = {
            "thread_id": str(configurable["thread_id"]) if configurable.get("thread_id") is not None else None,
            "checkpoint_ns": configurable.get("checkpoint_ns"),
            "checkpoint_id": configurable.get("checkpoint_id"),
            "filter": codec.json_text(filter) if filter else None,
        }
        self.cursor = get_checkpoint_id(before) if before else None
        self.remaining = limit
        self.done = False
        self.page = PAGE

    def next_query(self) -> dict[str, Any] | None:
        if self.done or (self.remaining is not None and self.remaining <= 0):
            return None
        self.page = min(PAGE, self.remaining) if self.remaining is not None else PAGE
        return {**self.query, "before": self.cursor, "limit": self.page}

    def took(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.remaining is not None:
            self.remaining -= len(items)
        self.done = len(items) < self.page
        if items:
            self.cursor = items[-1]["checkpoint_id"]
        return items


__all__ = ["QuestlogSaver", "errors"]
