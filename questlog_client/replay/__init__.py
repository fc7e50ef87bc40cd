"""The engine of `replaycheck` (its front is `questlog_client.testing`), by concern:

- `steps`: how an agent process is watched — a transport under its client that reports each step
  (a state-changing call the server accepted, or a side effect) and each resume bundle;
- `child`: the agent process, with its step reports and its crash point;
- `harness`: one execution of a scenario (uninterrupted or crashed after a step), with the person;
- `compare`: an execution against the uninterrupted one;
- `scenario`: what is replayed (agent, mission, person).
"""
