"""The test fixtures' ``redis-server``: it serves where its URL says, and an append-only one
keeps what it acknowledged across a ``SIGKILL`` and a restart on the same port."""

from __future__ import annotations

from collections.abc import Callable

import redis

from tests.redis_server import RedisServer


def test_the_tcp_server_answers_ping_at_its_url(redis_server: RedisServer) -> None:
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.ping() is True


def test_the_unix_socket_server_answers_ping_at_its_url(redis_unix_server: RedisServer) -> None:
    assert redis_unix_server.url.startswith("unix://")
    with redis.Redis.from_url(redis_unix_server.url) as client:
        assert client.ping() is True


def test_an_append_only_server_keeps_acknowledged_writes_across_a_kill(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory(appendfsync="always").start()
    with redis.Redis.from_url(server.url) as client:
        client.xadd("s", {"f": b"one"}, id="1-0")
    server.kill()
    server.start()
    with redis.Redis.from_url(server.url) as client:
        assert client.xrange("s") == [(b"1-0", {b"f": b"one"})]
