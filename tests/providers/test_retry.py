"""RetryPolicy, Retry-After parsing and ProviderError's text, without a network."""

from __future__ import annotations

import email.utils

import pytest

from cleveragents.providers import ProviderError, RetryPolicy, is_retryable_status, retry_after_s
from cleveragents.tool import ToolRuntimeError


def test_backoff_doubles_from_the_base_delay_without_jitter() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=100, jitter=0)

    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]


def test_backoff_is_capped_at_max_delay() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=3.0, jitter=0)

    assert policy.delay(10) == 3.0


def test_jitter_takes_off_at_most_its_fraction_of_the_backoff() -> None:
    policy = RetryPolicy(base_delay_s=1.0, jitter=0.25)

    assert policy.delay(1, rng=lambda: 0.0) == 1.0
    assert policy.delay(1, rng=lambda: 1.0) == 0.75


def test_retry_after_is_waited_exactly() -> None:
    assert RetryPolicy().delay(1, retry_after=7.5) == 7.5


def test_retry_after_beyond_the_limit_means_do_not_retry() -> None:
    assert RetryPolicy(max_retry_after_s=60).delay(1, retry_after=61) is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_headers_are_read_in_seconds(
    headers: dict[str, str], expected: float | None
) -> None:
    assert retry_after_s(headers) == expected


def test_retry_after_may_be_an_http_date() -> None:
    date = email.utils.formatdate(1_000_030, usegmt=True)

    assert retry_after_s({"retry-after": date}, now=1_000_000) == 30.0


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(408, True), (409, True), (429, True), (500, True), (529, True), (400, False), (401, False)],
)
def test_which_statuses_are_retried(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


def test_provider_error_belongs_to_the_project_hierarchy_and_reads_well() -> None:
    error = ProviderError("openai", "Overloaded", status=503, request_id="req_1", attempts=3)

    assert isinstance(error, ToolRuntimeError)
    assert str(error) == "openai: HTTP 503: Overloaded (request id req_1, 3 attempts)"


@pytest.mark.parametrize("bad", [{"base_delay_s": -1}, {"jitter": 2}])
def test_a_nonsensical_policy_raises_value_error(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        RetryPolicy(**bad)
