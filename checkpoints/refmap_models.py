"""The shared reference maps' model and the checkpoint query set that stores them (a module of
`checkpoints.models`, which imports both: models.py stays under the line limit)."""

from collections.abc import Collection, Iterable
from typing import Any

from django.db import models

from checkpoints import refmaps


class RefMap(models.Model):
    """A reference map ({part name: blob sha256}) stored once, addressed by the sha256 of its
    canonical JSON, and shared by every checkpoint whose map it is (`checkpoints.refmaps`). Like a
    blob it lives while a checkpoint refers to it; the blob collector deletes it with the last."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    refs = models.JSONField()

    class Meta:
        app_label = "quests"
        db_table = "checkpoints_refmap"

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({len(self.refs)} refs)"

    @staticmethod
    def store(maps: dict[str, dict[str, str]]) -> None:
        """Store the maps not stored yet (two writers storing the same map at once both succeed)."""
        if maps:
            RefMap.objects.bulk_create([RefMap(sha256=sha, refs=refs) for sha, refs in maps.items()], ignore_conflicts=True)


class CheckpointQuerySet(models.QuerySet):
    def with_refs(self) -> "CheckpointQuerySet":
        """Checkpoints with their reference maps read in the same query (`state_refs`,
        `agent_state_refs` then cost nothing more)."""
        return self.select_related("state_map", "agent_map")

    def with_report(self) -> "CheckpointQuerySet":
        """Checkpoints with their compaction report read in the same query."""
        return self.select_related("report")

    def bulk_create(
        self,
        objs: Iterable[Any],
        batch_size: int | None = None,
        ignore_conflicts: bool = False,
        update_conflicts: bool = False,
        update_fields: Collection[str] | None = None,
        unique_fields: Collection[str] | None = None,
    ) -> list[Any]:
        """Checkpoints given their refs store their maps first (one insert for all of them)."""
        objs = list(objs)
        RefMap.store({sha: refs for obj in objs for sha, refs in obj.maps_to_store().items()})
        return super().bulk_create(
            objs,
            batch_size=batch_size,
            ignore_conflicts=ignore_conflicts,
            update_conflicts=update_conflicts,
            update_fields=update_fields,
            unique_fields=unique_fields,
        )


class SharedRefs:
    """A checkpoint's refs as its readers see them, over the maps it names (`state_map`,
    `agent_map` + `agent_delta`); given to the constructor, the maps are stored on save."""

    state_map: RefMap
    state_map_id: str
    agent_map: RefMap
    agent_map_id: str
    agent_delta: dict[str, str | None]
    report: RefMap | None
    report_id: str | None

    def save(self, *args: Any, **kwargs: Any) -> None:
        RefMap.store(self.maps_to_store())
        super().save(*args, **kwargs)  # type: ignore[misc]  # the model's, after this mixin in the MRO

    @property
    def state_refs(self) -> dict[str, str]:
        if "_state_refs" not in self.__dict__:
            self.__dict__["_state_refs"] = dict(self.state_map.refs)
        return self.__dict__["_state_refs"]

    @state_refs.setter
    def state_refs(self, refs: dict[str, str]) -> None:
        self.state_map_id = refmaps.map_sha(refs)
        self.__dict__["_state_refs"] = dict(refs)
        self.__dict__.setdefault("_maps_to_store", {})[self.state_map_id] = dict(refs)

    @property
    def agent_state_refs(self) -> dict[str, str]:
        if "_agent_state_refs" not in self.__dict__:
            self.__dict__["_agent_state_refs"] = refmaps.resolved(self.agent_map.refs, self.agent_delta)
        return self.__dict__["_agent_state_refs"]

    @agent_state_refs.setter
    def agent_state_refs(self, refs: dict[str, str]) -> None:
        """Given whole, the refs are a base of their own (the engine's writes keep deltas)."""
        self.agent_layout = refmaps.agent_layout(refs, None)

    @property
    def agent_layout(self) -> refmaps.AgentLayout:
        return refmaps.AgentLayout(base=self.agent_map_id, delta=dict(self.agent_delta), refs=self.agent_state_refs)

    @agent_layout.setter
    def agent_layout(self, layout: refmaps.AgentLayout) -> None:
        self.agent_map_id, self.agent_delta = layout.base, dict(layout.delta)
        self.__dict__["_agent_state_refs"] = dict(layout.refs)
        self.__dict__.setdefault("_maps_to_store", {}).update(layout.new_maps)

    @property
    def compaction_report(self) -> dict[str, Any]:
        """The checkpoint's compaction report, stored once however many checkpoints repeat it."""
        if "_compaction_report" not in self.__dict__:
            self.__dict__["_compaction_report"] = dict(self.report.refs) if self.report_id and self.report else {}
        return self.__dict__["_compaction_report"]

    @compaction_report.setter
    def compaction_report(self, report: dict[str, Any]) -> None:
        self.report_id = refmaps.map_sha(report) if report else None
        self.__dict__["_compaction_report"] = dict(report)
        if self.report_id:
            self.__dict__.setdefault("_maps_to_store", {})[self.report_id] = dict(report)

    def maps_to_store(self) -> dict[str, dict[str, str]]:
        """The maps this (unsaved) checkpoint was given and that may not be stored yet (a
        checkpoint given no refs has empty ones, as the columns' defaults once were)."""
        if self.state_map_id is None:
            self.state_refs = {}
        if self.agent_map_id is None:
            self.agent_state_refs = {}
        return self.__dict__.pop("_maps_to_store", {})
