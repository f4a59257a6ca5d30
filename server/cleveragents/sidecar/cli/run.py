"""``cleveragents-sidecar run PROMPT``: start a run from a terminal and follow it to its end.

The run streams (``StreamToolLoop``) and is drawn as ``watch`` draws it; the exit status says
how it ended. ``--script FILE`` plays a JSON array of LLM turns instead of the profile's
model (a dry run). Without ``--detach``, Ctrl-C cancels the run; with it the run goes on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from cleveragents.sidecar.cli.watch import WatchView, show_stream

if TYPE_CHECKING:  # the client is imported only by the commands that talk to a sidecar
    from cleveragents.client import SidecarClient

__all__ = ["add_run_arguments", "start_run"]


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``run`` command's own flags (the client flags are added by the caller)."""
    parser.add_argument("prompt", metavar="PROMPT", help="the task for the model ('-': stdin)")
    parser.add_argument(
        "--script",
        type=Path,
        metavar="FILE",
        help="a JSON array of LLM turns to play instead of the profile's model (a dry run)",
    )
    parser.add_argument("--profile", default="", help="the LLM profile (default: the sidecar's)")
    parser.add_argument("--model", default="", help="a model instead of the profile's own")
    parser.add_argument(
        "--max-iterations", type=int, default=0, metavar="N", help="0: the sidecar's default"
    )
    parser.add_argument(
        "--tool",
        dest="tools",
        action="append",
        default=[],
        metavar="NAME",
        help="offer only these tools (repeat it; default: all the sidecar's tools)",
    )
    parser.add_argument("--run-id", default="", help="the run's id (default: the sidecar picks)")
    parser.add_argument(
        "--sandbox-root", default="", metavar="DIR", help="the file tools' directory (absolute)"
    )
    parser.add_argument(
        "--automation-profile", default="", metavar="NAME", help="which calls ask for approval"
    )
    parser.add_argument(
        "--max-wall-clock", type=float, default=None, metavar="SECONDS", help="the run's time limit"
    )
    parser.add_argument(
        "--detach",
        action="store_true",
        help="the run goes on if this command stops (Ctrl-C); follow it with `watch`",
    )


def start_run(client: SidecarClient, args: argparse.Namespace, out: TextIO) -> int:
    """Start the run ``args`` describe and draw it on ``out``; returns the exit status (0 it
    completed, 1 it failed or was cancelled, 2 it could not be started or followed)."""
    from cleveragents.tool import ToolActorContext

    try:
        prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
        script = _read_script(args.script) if args.script is not None else None
    except (OSError, ValueError) as exc:
        print(f"cleveragents-sidecar: {exc}", file=sys.stderr)
        return 2
    context = None
    if args.sandbox_root or args.automation_profile:
        context = ToolActorContext(
            sandbox_root=args.sandbox_root, automation_profile=args.automation_profile
        )
    events = client.stream_tool_loop(
        prompt,
        detach=args.detach,
        context=context,
        max_iterations=args.max_iterations,
        profile=args.profile,
        model=args.model,
        script=script,
        tool_names=args.tools,
        run_id=args.run_id,
        max_wall_clock_s=args.max_wall_clock,
        stream_deltas=True,  # the model's text is drawn as it streams
    )

    def interrupted(view: WatchView) -> None:
        run = view.run_id or "(not started)"
        if args.detach:
            print(
                f"run {run} goes on (detached): cleveragents-sidecar watch {run}", file=sys.stderr
            )
        else:
            print(f"run {run}: cancelled (interrupted)", file=sys.stderr)

    return show_stream(events, out, "run the prompt", interrupted)


def _read_script(path: Path) -> list[Any]:
    """The turns in ``path``: a JSON array (the sidecar checks each turn)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise OSError(f"cannot read the script {str(path)!r}: {exc.strerror or exc}") from None
    try:
        turns = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"the script {str(path)!r} is not valid JSON ({exc.msg} at line {exc.lineno}, "
            f"column {exc.colno})"
        ) from None
    except RecursionError:
        raise ValueError(
            f"the script {str(path)!r} is nested too deeply to read (arrays and objects more "
            f"than about {sys.getrecursionlimit()} levels inside each other)"
        ) from None
    if not isinstance(turns, list):
        raise ValueError(
            f"the script {str(path)!r} must be a JSON array of turns, not a {type(turns).__name__}"
        )
    return turns
