"""``cleveragents-sidecar console [RUN_ID]``: print the run console's URL (of one run's page, with
a ``RUN_ID``), and check that a console answers there.

The URL comes from a running sidecar's ready file (``--ready-file``: the address it bound,
port 0 included), else from the settings ``serve`` reads (``--config``, the environment,
``--console-listen``). Only the URL goes to stdout, so that ``xdg-open "$(cleveragents-sidecar
console)"`` opens it. No HTTP library is imported: the check is one ``GET /api/ping``.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request
from typing import TextIO

from cleveragents.sidecar.config import load_config
from cleveragents.sidecar.console.address import page_url, run_url
from cleveragents.sidecar.errors import ConfigError

__all__ = ["add_console_arguments", "show_console"]

_CHECK_TIMEOUT_S = 5.0


def add_console_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``console``."""
    parser.add_argument(
        "run_id", nargs="?", metavar="RUN_ID", help="print the URL of this run's page"
    )
    parser.add_argument(
        "--config", help="the sidecar's TOML configuration file (env CLEVERAGENTS_SIDECAR_CONFIG)"
    )
    parser.add_argument(
        "--console-listen", metavar="HOST:PORT", help="the console's address (console_listen)"
    )
    parser.add_argument(
        "--ready-file",
        metavar="PATH",
        help="the ready file of a running sidecar (serve --ready-file): the address it bound",
    )
    parser.add_argument(
        "--tls-ca-file", metavar="PEM", help="trust this CA when checking an HTTPS console"
    )
    parser.add_argument(
        "--no-check", action="store_true", help="print the URL without asking the console"
    )


def show_console(args: argparse.Namespace, out: TextIO, err: TextIO = sys.stderr) -> int:
    """Print the URL; 0 when a console answers there, 1 when the console is off (or its
    port is picked at start), 2 when nothing answers."""
    try:
        page = _page(args)
    except (ConfigError, OSError, ValueError) as exc:
        print(f"cleveragents-sidecar: {exc}", file=err)
        return 1
    url = run_url(page, args.run_id) if args.run_id else page
    print(url, file=out)
    if args.no_check:
        return 0
    context = None
    if page.startswith("https:"):
        context = ssl.create_default_context(cafile=args.tls_ca_file)
    try:
        with urllib.request.urlopen(
            page + "api/ping", timeout=_CHECK_TIMEOUT_S, context=context
        ) as answer:
            answered = json.loads(answer.read()).get("console") == "cleveragents-sidecar"
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(
            f"cleveragents-sidecar: no console answers at {page} ({reason}): is the sidecar "
            "serving, with console_listen set?",
            file=err,
        )
        return 2
    if not answered:
        print(f"cleveragents-sidecar: {page} answers, but not as a run console", file=err)
        return 2
    return 0


def _page(args: argparse.Namespace) -> str:
    """The console's page URL, from a ready file or from the settings."""
    if args.ready_file:
        with open(args.ready_file, encoding="utf-8") as fh:
            ready = json.loads(fh.readline())
        url = ready.get("console_url")
        if not url:
            raise ConfigError(
                f"the sidecar of {args.ready_file} serves no console: start it with "
                "console_listen set (serve --console-listen 127.0.0.1:PORT)"
            )
        return str(url)
    overrides = {"console_listen": args.console_listen}
    config = load_config(args.config, overrides=overrides)
    listen = config.console.listen
    if not listen:
        raise ConfigError(
            "the console is off: set console_listen (the TOML key, "
            "CLEVERAGENTS_SIDECAR_CONSOLE_LISTEN, or serve --console-listen HOST:PORT)"
        )
    host, _, port = listen.rpartition(":")
    if port == "0":
        raise ConfigError(
            f"console_listen is {listen!r}: the port is picked at start. Ask the running "
            "sidecar: --ready-file PATH (serve --ready-file), or read serve's "
            "'console at URL' line"
        )
    return page_url(host, int(port), tls=bool(config.tls.cert_file))
