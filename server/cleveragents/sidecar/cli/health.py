"""``cleveragents-sidecar health``: ask a sidecar's standard gRPC health service once, for a
container's health check or a Kubernetes exec probe (which cannot speak gRPC to a unix socket).

Without ``--live`` it succeeds only when the service is ``SERVING`` (a readiness probe: the
sidecar goes ``NOT_SERVING`` while its run store fails, and while it shuts down). With
``--live`` any answer will do. A liveness probe then restarts only a sidecar that no longer
answers, not one whose disk is full.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

from cleveragents.sidecar.config.settings import ENV_PREFIX

__all__ = ["HEALTH_SERVICE", "add_health_arguments", "check_health"]

#: The service a readiness check asks for (the sidecar sets it with the whole server's).
HEALTH_SERVICE = "cleveragents.toolruntime.v1.ToolRuntimeService"
#: ``--target``'s default when unset: the address ``serve`` listens on, from the same variable.
LISTEN_ENV = ENV_PREFIX + "LISTEN"
_FALLBACK_TARGET = "127.0.0.1:50051"


def add_health_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``health``."""
    default = os.environ.get(LISTEN_ENV) or _FALLBACK_TARGET
    parser.add_argument(
        "--target",
        default=default,
        metavar="HOST:PORT",
        help=f"the sidecar's address, or unix:/path (default: ${LISTEN_ENV}, the address "
        f"serve listens on, else {_FALLBACK_TARGET}; now {default})",
    )
    parser.add_argument(
        "--service",
        default=HEALTH_SERVICE,
        help=f"the health service name to ask for ('' is the whole server; default: "
        f"{HEALTH_SERVICE})",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="succeed on any answer, NOT_SERVING included: the process is up and answers "
        "(a liveness probe); without it, only SERVING succeeds (a readiness probe)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long to wait for the answer, connecting included (default: 5)",
    )
    parser.add_argument(
        "--tls-ca-file", metavar="PEM", help="connect over TLS, trusting this CA certificate"
    )


def check_health(args: argparse.Namespace, out: TextIO) -> int:
    """Ask once; the exit status: 0 healthy (``SERVING``, or any answer with ``--live``), 1
    answered but not serving (or no such service), 2 no answer within ``--timeout``."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    if not args.timeout > 0:
        print("cleveragents-sidecar: --timeout must be a positive number", file=sys.stderr)
        return 2
    try:
        channel = _channel(args.target, args.tls_ca_file)
    except OSError as exc:
        print(f"cleveragents-sidecar: {exc}", file=sys.stderr)
        return 2
    with channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)  # its stubs lack Check
        request = health_pb2.HealthCheckRequest(service=args.service)
        try:
            response = stub.Check(request, timeout=args.timeout, wait_for_ready=True)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            if code == grpc.StatusCode.NOT_FOUND:
                out.write(f"{args.target}: no health status for service {args.service!r}\n")
                return 0 if args.live else 1
            details = exc.details() if hasattr(exc, "details") else str(exc)
            print(
                f"cleveragents-sidecar: no health answer from {args.target} within "
                f"{args.timeout:g} s ({code.name}: {details}); is the sidecar running and "
                "listening there?",
                file=sys.stderr,
            )
            return 2
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    out.write(f"{args.target}: {status}\n")
    return 0 if args.live or response.status == health_pb2.HealthCheckResponse.SERVING else 1


def _channel(target: str, ca_file: str | None) -> Any:
    import grpc

    if not ca_file:
        return grpc.insecure_channel(target)
    with open(ca_file, "rb") as fh:
        return grpc.secure_channel(target, grpc.ssl_channel_credentials(fh.read()))
