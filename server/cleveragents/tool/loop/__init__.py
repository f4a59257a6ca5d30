"""The loop (private; the public names are in ``cleveragents.tool``): the runtime, one
response's ``ToolBatch``, the run's bookkeeping, the governance gate and small helpers."""
