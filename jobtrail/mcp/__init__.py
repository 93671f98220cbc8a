"""The evidence API for investigation agents: a read-only Model Context Protocol server.

- `tools.py`: the tools and their argument models (the JSON Schema an agent reads);
- `evidence.py`: the reads behind them, bound to one principal (timeline, entity, `where`,
  completeness), `incident.py`: the incident reads (cause, candidates, diagnosis, similar
  incidents, actions with their commands);
- `paging.py`: cursors, what an answer cites (event ids, incident-log seqs) and its links;
- `server.py`: the SDK's server over stdio and streamable HTTP, and who is asking.

docs/agents.md says how to point an agent at it.
"""
