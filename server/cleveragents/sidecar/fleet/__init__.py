"""The fleet: sidecars that share one Redis run store, and where each run lives among them.

Importing this package imports no redis-py: the Redis modules load only for a Redis store.
"""
