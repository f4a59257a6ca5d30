"""``cleveragents-sidecar``: run the sidecar; start, watch, list and cancel its runs; decide
approvals.

``serve`` runs the sidecar (``serve.py``). ``run PROMPT`` starts a run and follows it to its
end (``run.py``); ``watch RUN_ID`` follows one run live in the terminal (``watch.py``).
``runs`` lists the recent runs (``ListRuns``), or shows the runs it is given by id, with their
failed calls (``GetRun``; ``tables.py``). ``cancel RUN_ID`` cancels one (``CancelRun``;
``cancel.py``). ``approve``/``deny RUN_ID CALL_ID`` decide a call that waits for approval
(``DecideApproval``; ``approve.py``). ``health`` asks the standard health service once, for
a container's health check or an exec probe (``health.py``). ``console [RUN_ID]`` prints the
run console's URL (``console.py``). Only the commands that talk to a sidecar import the client,
and ``--version`` imports nothing of the sidecar (``version.py``): it answers at once.
"""

from __future__ import annotations

import sys

from cleveragents.sidecar.cli.version import version

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see the package's)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from cleveragents.client import SidecarClient

__all__ = ["DEFAULT_TARGET", "build_parser", "main"]

DEFAULT_TARGET = "127.0.0.1:50051"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, every command and flag (the docs' CLI reference reads it)."""
    import argparse

    from cleveragents.sidecar.cli.console import add_console_arguments
    from cleveragents.sidecar.cli.health import add_health_arguments
    from cleveragents.sidecar.cli.run import add_run_arguments
    from cleveragents.sidecar.cli.serve import add_serve_arguments
    from cleveragents.sidecar.config.settings import ENV_PREFIX

    parser = argparse.ArgumentParser(
        prog="cleveragents-sidecar",
        description="A gRPC sidecar that runs an LLM tool-calling loop.",
        epilog=f"Every setting can also come from {ENV_PREFIX}<SETTING> environment variables.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_arguments(
        commands.add_parser(
            "serve",
            help="serve the ToolRuntimeService until SIGTERM/SIGINT",
            description="Serve the ToolRuntimeService until SIGTERM/SIGINT (a second one "
            "cancels the live runs at once). Settings come from the defaults, then --config, "
            "then CLEVERAGENTS_SIDECAR_<SETTING> variables, then these flags.",
        )
    )

    run_command = commands.add_parser(
        "run",
        help="start a run and follow it to its end, as `watch` shows it",
        description="Start a run (StreamToolLoop) and follow it live, as `watch` does. Exit "
        "status: 0 when it completed, 1 when it failed or was cancelled, 2 when it could not "
        "be started or followed (the message says why), 130 when interrupted (Ctrl-C cancels "
        "the run unless --detach).",
    )
    add_run_arguments(run_command)
    _client_arguments(run_command)

    watch_command = commands.add_parser(
        "watch",
        help="follow a run live: its tool calls as they end, then its records and result",
        description="Follow a run live. Exit status: 0 when it completed, 1 when it failed or "
        "was cancelled, 2 when the sidecar could not be asked.",
    )
    watch_command.add_argument("run_id", metavar="RUN_ID", help="the run to follow")
    watch_command.add_argument(
        "--after", type=int, default=0, metavar="N", help="start after event N (default: 0)"
    )
    _client_arguments(watch_command)

    cancel_command = commands.add_parser(
        "cancel",
        help="cancel a run",
        description="Cancel a run (CancelRun): it ends with run_cancelled. Exit status: 0 when "
        "this command cancelled it, 1 when there is no such run or it had already ended, "
        "cancelled included (its state is printed), 2 when the sidecar could not be asked or "
        "refused (the message says why).",
    )
    cancel_command.add_argument("run_id", metavar="RUN_ID", help="the run to cancel")
    cancel_command.add_argument("--reason", default="", help="why, recorded with the run's end")
    _client_arguments(cancel_command)

    runs = commands.add_parser(
        "runs", help="show runs: their state, iterations and tool calls (and the failed ones)"
    )
    runs.add_argument(
        "run_ids", nargs="*", metavar="RUN_ID", help="the runs to show (default: recent runs)"
    )
    runs.add_argument("--limit", type=int, default=20, help="recent runs to list (default: 20)")
    _client_arguments(runs)

    for verb, does in (("approve", "let it run"), ("deny", "refuse it")):
        command = commands.add_parser(
            verb,
            help=f"{verb} a tool call that waits for approval ({does})",
            description=f"{verb.capitalize()} a tool call that waits for approval (the "
            "DecideApproval RPC; `watch RUN_ID` shows the calls that wait). Exit status: 0 "
            "when decided, 1 when no such run or no such waiting call, 2 when the sidecar "
            "could not be asked.",
        )
        command.add_argument("run_id", metavar="RUN_ID", help="the run the call belongs to")
        command.add_argument("call_id", metavar="CALL_ID", help="the call that waits")
        command.add_argument("--reason", default="", help="why, recorded with the decision")
        _client_arguments(command)

    add_console_arguments(
        commands.add_parser(
            "console",
            help="print the run console's URL (a run's page with RUN_ID), checking it answers",
            description="Print the URL of the run console the sidecar serves in the browser "
            "(console_listen), or of one run's page, and check that it answers. Exit status: "
            "0 when it answers, 1 when the console is off (or its port is picked at start: "
            "give --ready-file), 2 when nothing answers there.",
        )
    )

    add_health_arguments(
        commands.add_parser(
            "health",
            help="ask the sidecar's gRPC health service once (a health check, a probe)",
            description="Ask the standard gRPC health service once (no token needed), as a "
            "container health check or a Kubernetes exec probe does. Exit status: 0 when "
            "SERVING (with --live: when it answers at all), 1 when it answers NOT_SERVING or "
            "knows no such service, 2 when nothing answers within --timeout.",
        )
    )
    return parser


def _client_arguments(parser: argparse.ArgumentParser) -> None:
    import os

    from cleveragents.sidecar.cli.text import TOKEN_ENV

    parser.add_argument(
        "--target",
        default=DEFAULT_TARGET,
        metavar="HOST:PORT",
        help=f"the sidecar's address, or unix:/path (default: {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help=f"the sidecar's auth token (default: ${TOKEN_ENV})",
    )
    parser.add_argument(
        "--tls-ca-file", metavar="PEM", help="connect over TLS, trusting this CA certificate"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments == ["--version"]:  # before the parser, which imports every command
        print(f"cleveragents-sidecar {version()}")
        return 0
    args = build_parser().parse_args(arguments)
    if args.command in ("run", "watch", "cancel", "runs", "approve", "deny"):
        return _talk(args)
    if args.command == "health":
        from cleveragents.sidecar.cli.health import check_health

        return check_health(args, sys.stdout)
    if args.command == "console":
        from cleveragents.sidecar.cli.console import show_console

        return show_console(args, sys.stdout)
    from cleveragents.sidecar.cli.serve import serve

    return serve(args)


def _talk(args: argparse.Namespace) -> int:
    """One of the commands that talk to a sidecar as its client; the exit status."""
    from cleveragents.sidecar.cli.approve import decide
    from cleveragents.sidecar.cli.cancel import cancel
    from cleveragents.sidecar.cli.run import start_run
    from cleveragents.sidecar.cli.tables import show_runs
    from cleveragents.sidecar.cli.watch import watch

    try:
        client = _connect(args)
    except OSError as exc:
        print(f"cleveragents-sidecar: {exc}", file=sys.stderr)
        return 2
    with client:
        if args.command == "run":
            return start_run(client, args, sys.stdout)
        if args.command == "watch":
            return watch(client, args.run_id, args.after, sys.stdout)
        if args.command == "cancel":
            return cancel(client, args.run_id, args.reason, sys.stdout)
        if args.command in ("approve", "deny"):
            approved = args.command == "approve"
            return decide(client, args.run_id, args.call_id, approved, args.reason, sys.stdout)
        return show_runs(client, args.run_ids, args.limit, sys.stdout)


def _connect(args: argparse.Namespace) -> SidecarClient:
    import grpc

    from cleveragents.client import SidecarClient

    credentials = None
    if args.tls_ca_file:
        with open(args.tls_ca_file, "rb") as fh:
            credentials = grpc.ssl_channel_credentials(root_certificates=fh.read())
    return SidecarClient(args.target, token=args.token or None, credentials=credentials)
