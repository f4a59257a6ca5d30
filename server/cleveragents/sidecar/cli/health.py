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
    parser.add_argument(
        "--tls-cert-file",
        metavar="PEM",
        help="with --tls-ca-file: present this client certificate (a sidecar with "
        "tls_client_ca_file set, mutual TLS, refuses the handshake without one)",
    )
    parser.add_argument("--tls-key-file", metavar="PEM", help="the private key of --tls-cert-file")
    parser.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="with --tls-ca-file: the name the sidecar's certificate must carry, when the "
        "target is a unix socket or an address the certificate does not name",
    )


def check_health(args: argparse.Namespace, out: TextIO) -> int:
    """Ask once; the exit status: 0 healthy (``SERVING``, or any answer with ``--live``), 1
    answered but not serving (or no such service), 2 no answer within ``--timeout``."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    if not args.timeout > 0:
        print("cleveragents-sidecar: --timeout must be a positive number", file=sys.stderr)
        return 2
    problem = _tls_usage_problem(args)
    if problem:
        print(f"cleveragents-sidecar: {problem}", file=sys.stderr)
        return 2
    try:
        channel = _channel(args)
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


def _tls_usage_problem(args: argparse.Namespace) -> str:
    """Why the TLS flags do not go together ('' when they do): a half-given client
    certificate would otherwise fail as an unexplained handshake error."""
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        return "--tls-cert-file and --tls-key-file go together: give both or neither"
    if (args.tls_cert_file or args.tls_server_name) and not args.tls_ca_file:
        flag = "--tls-cert-file" if args.tls_cert_file else "--tls-server-name"
        return f"{flag} needs --tls-ca-file (the CA that issued the sidecar's certificate)"
    return ""


def _channel(args: argparse.Namespace) -> Any:
    """A plain channel, or a TLS one trusting ``--tls-ca-file`` (with a client certificate
    for mutual TLS, and the name to check the sidecar's certificate against)."""
    import grpc

    if not args.tls_ca_file:
        return grpc.insecure_channel(args.target)
    with open(args.tls_ca_file, "rb") as fh:
        ca = fh.read()
    key = chain = None
    if args.tls_cert_file:
        with open(args.tls_key_file, "rb") as fh:
            key = fh.read()
        with open(args.tls_cert_file, "rb") as fh:
            chain = fh.read()
    credentials = grpc.ssl_channel_credentials(ca, private_key=key, certificate_chain=chain)
    options = []
    if args.tls_server_name:
        options.append(("grpc.ssl_target_name_override", args.tls_server_name))
    return grpc.secure_channel(args.target, credentials, options=options)
