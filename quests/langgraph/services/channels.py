"""A LangGraph checkpoint's channels as Questlog stores them: each value the client encoded
({"type", "data"}) is a content-addressed blob, and a checkpoint's channel map names, for every
channel, its version and that blob ({channel: [version, sha256, size]}). A save sends only the
channels that changed; the others are found in its parent, or else in the namespace's history."""

from typing import Any

from checkpoints.services import canonical_json, sha256_hex
from quests.langgraph.models import GraphCheckpoint
from quests.models import Mission


def encoded(value: dict[str, Any] | None) -> tuple[str, bytes]:
    content = canonical_json(value)
    return sha256_hex(content), content


def channels_resolved(
    mission: Mission, ns: str, versions: dict[str, Any], channels: dict[str, dict[str, Any]], *, parent_channels: dict[str, list[Any]] | None
) -> tuple[dict[str, tuple[str, str, int]], dict[str, bytes]]:
    """{channel: (version, sha, size)} for every channel the checkpoint has, and the contents of the
    changed ones. An unchanged channel is found in the parent, or else in the namespace's newest
    checkpoint that saw it at that version (a checkpoint saved without its parent's id)."""
    resolved, contents, missing = channels_known(versions, channels, parent_channels)
    if missing:
        for seen in GraphCheckpoint.objects.filter(mission=mission, ns=ns).order_by("-graph_id").values_list("channels", flat=True)[:200]:
            for name, version in list(missing.items()):
                found = seen.get(name)
                if found and found[0] == version:
                    resolved[name] = tuple(found)
                    del missing[name]
            if not missing:
                break
    # A version no checkpoint stored has no value (LangGraph's own savers read it as empty).
    return resolved, contents


def channels_known(
    versions: dict[str, Any], channels: dict[str, dict[str, Any]], parent_channels: dict[str, list[Any]] | None
) -> tuple[dict[str, tuple[str, str, int]], dict[str, bytes], dict[str, str]]:
    """The changed channels and the unchanged ones the parent holds at their version (`channels_resolved`),
    and the channels still missing ({name: version})."""
    resolved: dict[str, tuple[str, str, int]] = {}
    contents: dict[str, bytes] = {}
    for name, item in channels.items():
        sha, content = encoded(item.get("value"))
        resolved[name] = (str(item.get("version")), sha, len(content))
        contents[sha] = content
    missing = {name: str(version) for name, version in versions.items() if name not in resolved}
    for name, version in list(missing.items()):
        found = (parent_channels or {}).get(name)
        if found and found[0] == version:
            resolved[name] = (found[0], found[1], found[2])
            del missing[name]
    return resolved, contents, missing
