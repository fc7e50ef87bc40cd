"""LangGraph's rules, one module per concern: `saves` (threads as missions, the session run,
checkpoints and pending writes, interrupts as approvals), `channels` (a checkpoint's channel map),
`reads` (tuples and lists), `history` (a delta channel's history), `threads` (delete, copy, prune)
and `branch` (a person's restore opens a branch the graph resumes from)."""
