"""The one map from exceptions to gRPC status codes, for refused requests and failed runs.

A refused request raises ``SidecarError``, which names its own code. A run that fails
carries the exception that ended it (``RunFailed.error``): the LLM caller's own error, or an
``LLMCallError`` wrapping it.
"""

from __future__ import annotations

import grpc

from cleveragents.providers import AnswerTooLargeError, ProviderError
from cleveragents.sidecar.errors import SidecarError
from cleveragents.tool import LLMCallError, ScriptExhaustedError

__all__ = ["status_from_code", "status_of"]

#: The provider refused the sidecar's key (not UNAUTHENTICATED: that one is about the client's
#: own credentials). Other provider failures: UNAVAILABLE when a later try may succeed
#: (connection, timeout, 408/409/429/5xx), else FAILED_PRECONDITION (another 4xx, or an
#: answer that cannot be used): something must change first.
_PROVIDER_CODES = {401: grpc.StatusCode.PERMISSION_DENIED, 403: grpc.StatusCode.PERMISSION_DENIED}


_BY_CODE = {code.value[0]: code for code in grpc.StatusCode}


def status_from_code(code: int) -> grpc.StatusCode:
    """The status a ``run_failed`` event's number stands for (``UNKNOWN`` for any other)."""
    return _BY_CODE.get(code, grpc.StatusCode.UNKNOWN)


def status_of(error: BaseException | None) -> grpc.StatusCode:
    """The status that reports ``error`` to a client.

    ``SidecarError``: its code (``DamagedLog``, a stored log that cannot be read back:
    ``DATA_LOSS``, naming the run and the event). A provider's answer too large to keep:
    ``RESOURCE_EXHAUSTED`` (as any event too large for one message). A provider's error: by
    its HTTP status, as above. A scripted LLM that ran out of turns: ``FAILED_PRECONDITION``
    (the same request fails the same way again; the script must change). Any other failure of
    the LLM call: ``UNAVAILABLE``. No exception at all (a run that crashed in the sidecar
    itself): ``INTERNAL``.
    """
    cause = error.__cause__ if isinstance(error, LLMCallError) else error
    if isinstance(cause, SidecarError):
        return cause.code
    if isinstance(cause, AnswerTooLargeError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(cause, ProviderError):
        return _PROVIDER_CODES.get(cause.status or 0) or (
            grpc.StatusCode.UNAVAILABLE if cause.retryable else grpc.StatusCode.FAILED_PRECONDITION
        )
    if isinstance(cause, ScriptExhaustedError):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(error, LLMCallError) or isinstance(cause, Exception):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL
