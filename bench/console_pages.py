"""The pages of ``bench/console.py``, in a process of their own: one run feed a page (as the
console's page reads it: fetch, server-sent events), or one runs list, each read to its end.

``python console_pages.py URL [--list] RUN_ID...`` prints ``open`` once every feed sent its
first message, then, once every run feed ended, one JSON line: messages and bytes read.
A list feed never ends: it is closed once the run feeds have.
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp


async def read(
    http: aiohttp.ClientSession, url: str, opened: asyncio.Event, counts: list[int]
) -> None:
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as response:
        response.raise_for_status()
        first = True
        async for chunk in response.content.iter_any():
            counts[0] += chunk.count(b"\n\n")
            counts[1] += len(chunk)
            if first:
                first = False
                opened.set()


async def main(url: str, run_ids: list[str], listing: bool) -> None:
    counts = [0, 0]
    async with aiohttp.ClientSession() as http:
        feeds = [f"{url}api/runs/{run_id}/events" for run_id in run_ids]
        events = [asyncio.Event() for _ in feeds]
        tasks = [
            asyncio.create_task(read(http, f, e, counts))
            for f, e in zip(feeds, events, strict=True)
        ]
        lister = None
        if listing:
            listed = asyncio.Event()
            lister = asyncio.create_task(read(http, f"{url}api/runs", listed, counts))
            events.append(listed)
        for event in events:
            await event.wait()
        print("open", flush=True)
        await asyncio.gather(*tasks)
        if lister is not None:
            lister.cancel()
            await asyncio.gather(lister, return_exceptions=True)
    print(json.dumps({"messages": counts[0], "bytes": counts[1]}), flush=True)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    listing = "--list" in arguments
    arguments = [a for a in arguments if a != "--list"]
    asyncio.run(main(arguments[0], arguments[1:], listing))
