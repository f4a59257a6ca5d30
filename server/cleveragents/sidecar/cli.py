"""``cleveragents-sidecar``: run the sidecar from the command line."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from cleveragents.sidecar.config import ENV_PREFIX, load_config
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.logs import configure_logging
from cleveragents.sidecar.server import Sidecar

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cleveragents-sidecar",
        description="A gRPC sidecar that runs an LLM tool-calling loop.",
        epilog=f"Every setting can also come from {ENV_PREFIX}<SETTING> environment variables.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the ToolRuntimeService until SIGTERM/SIGINT")
    serve.add_argument("--listen", help="host:port (port 0 picks one) or unix:/path")
    serve.add_argument("--config", help="a TOML configuration file")
    serve.add_argument("--log-format", choices=("json", "console"), help="log line format")
    serve.add_argument("--log-level", help="debug, info, warning or error")
    serve.add_argument("--max-concurrent-runs", type=int, help="runs in flight at most")
    serve.add_argument("--shutdown-grace-s", type=float, help="seconds runs get to finish")
    serve.add_argument(
        "--watcher-queue-size", type=int, help="events a watcher may lag before it is dropped"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = _parser().parse_args(argv)
    overrides = {
        "listen": args.listen,
        "log_format": args.log_format,
        "log_level": args.log_level,
        "max_concurrent_runs": args.max_concurrent_runs,
        "shutdown_grace_s": args.shutdown_grace_s,
        "watcher_queue_size": args.watcher_queue_size,
    }
    try:
        config = load_config(args.config, overrides=overrides)
        configure_logging(config.log_format, config.log_level)
    except (ConfigError, ValueError) as exc:
        print(f"cleveragents-sidecar: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(Sidecar(config)))
    except ConfigError as exc:
        print(f"cleveragents-sidecar: {exc}", file=sys.stderr)
        return 2
    return 0


async def _serve(sidecar: Sidecar) -> None:
    address = await sidecar.start()
    print(f"cleveragents-sidecar listening on {address}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await sidecar.stop()


if __name__ == "__main__":
    sys.exit(main())
