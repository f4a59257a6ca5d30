"""Executing tools (private; the public names are in ``cleveragents.tool``): the registry,
schema derivation from type hints, the runner that executes one call, and tool limits."""
