"""The read side: what the pages show, each read in a fixed number of queries whatever the size of
what it reads (annotate + prefetch, never a query per row). One module per page group; decisions
about state (what is allowed, what comes next) come from the services.

- `board`: the board of quests, its cards and the versions its polling compares.
- `mission`: the mission page's windows of history, approvals, milestones and timeline.
- `tree`: the checkpoint tree and the overview of a whole history, from the mission page's rows.
- `ledger`: the operation ledger's page and the mission page's window of it.
- `compare`: the difference between two checkpoints' states, and what a checkpoint page offers to compare with.
- `people`: the inbox, recent decisions, tokens, and the counts of what waits for a person.
- `common`: what several of them share (search, the newest rows per group, the heavy fields a list leaves out).
"""
