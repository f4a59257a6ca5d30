"""The fleet: where each run lives, among the sidecars that share one Redis run store.

- ``directory``: ``RunDirectory.locate`` finds a run, here or on another sidecar, and returns a
  handle that acts on it where it lives (callers never branch on that); ``NoFleet`` is a
  sidecar alone.
- ``redis_fleet``: the other sidecars on one Redis, as the directory asks them: their runs,
  their control streams, and the hand-over of a parked Session run (one compare-and-set).
- ``mirrors``: other sidecars' runs, read back from the store and followed live.
- ``lease``: this sidecar's membership: its lease, adoption of dead sidecars' runs, its
  control stream.
- ``fencing``: the scripts every write to a run goes through, and the tokens this sidecar
  holds (the single-primary assumption is written there).
- ``redis_store``: run logs on Redis; ``layout``: its keys and entries; ``control``: the
  requests sidecars send each other; ``setup``: the store and directory a config asks for.

Importing this package imports no redis-py: the Redis modules load only for a Redis store.
"""
