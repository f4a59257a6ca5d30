"""Behind the sandbox-root check, the file tools themselves refuse pseudo file systems: a
procfs mounted inside an allowed root after the run started returns nothing of the kernel's.

The mount is made in a mount namespace of its own (``unshare -m``), where a fresh Python runs
the tools, so no other process on the machine sees it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SECRET = "pseudo-fs-secret-5e884898da"
_PROBE = """
import asyncio, json, os, sys
from cleveragents.sandbox import file_tools
from cleveragents.tool import ToolActorContext, ToolCall, ToolRunner

async def main():
    runner = ToolRunner(file_tools())
    context = ToolActorContext(sandbox_root=sys.argv[1])
    me = f"proc/{os.getpid()}"  # not proc/self: a symlink, which the tools never follow
    calls = [("read_file", {"path": f"{me}/environ"}), ("list_dir", {"path": me}),
             ("search_files", {"pattern": sys.argv[2]}), ("read_file", {"path": "notes.txt"})]
    out = []
    for i, (name, args) in enumerate(calls):
        record = await runner.run(ToolCall(f"c{i}", name, args), iteration=1, context=context)
        out.append({"tool": name, "success": record.success, "error": record.error,
                    "kind": record.error_kind and record.error_kind.value,
                    "output": record.output})
    print(json.dumps(out))

asyncio.run(main())
"""


def _run_with_procfs(root: Path) -> list[dict[str, object]]:
    script = 'mount -t proc proc "$0/proc" && exec "$@"'
    command = ["unshare", "-m", "sh", "-c", script, str(root), sys.executable, "-c", _PROBE]
    done = subprocess.run(
        [*command, str(root), SECRET],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "SIDECAR_TEST_SECRET": SECRET},
        timeout=60,
    )
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"cannot mount a private procfs here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    result: list[dict[str, object]] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare(1) is not installed")
def test_file_tools_refuse_a_procfs_mounted_inside_their_root(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "notes.txt").write_text("ordinary notes\n")

    read, listed, searched, notes = _run_with_procfs(tmp_path)

    assert (read["kind"], listed["kind"]) == ("denied", "denied")
    assert "proc file system" in str(read["error"])
    assert searched["success"] is True
    assert searched["output"] == {"matches": [], "truncated": False}
    assert notes["success"] is True  # the rest of the root still works
    assert SECRET not in json.dumps([read, listed, searched, notes])
