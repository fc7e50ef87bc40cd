"""A checkpoint's references, as every statement that reads them resolves them."""

# A checkpoint names its maps (checkpoints.refmaps): the state's, and the agent state's base with the
# checkpoint's delta laid over it (null removes a key). Every statement that reads a checkpoint's
# agent-state refs resolves them with this join and expression (`{checkpoint}`, `{base}`: aliases).
AGENT_BASE_JOIN = "LEFT JOIN checkpoints_refmap {base} ON {base}.sha256 = {checkpoint}.agent_map_id"
AGENT_REFS_PG = "jsonb_strip_nulls({base}.refs || {checkpoint}.agent_delta)"
AGENT_REFS_SQLITE = "json_patch({base}.refs, {checkpoint}.agent_delta)"
