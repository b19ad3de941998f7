"""Parse our conductor's monitoring answers with upstream's own client and pydantic models.

Run by check.sh inside the venv that has upstream installed:
    python models.py SOCKET JOB_ID
Prints one "ok ..." line per check; exits 1 on the first mismatch. This file uses upstream's
package as a library; it contains none of its code.
"""

import asyncio
import sys
from pathlib import Path

from mozart.daemon.ipc.client import DaemonClient
from mozart.daemon.profiler.models import ProcessEvent, SystemSnapshot
from mozart.daemon.types import DaemonStatus


async def main(socket: str, job_id: str) -> int:
    client = DaemonClient(Path(socket))
    DaemonStatus(**(await client.call("daemon.status")))
    print("ok    daemon.status parses as upstream's DaemonStatus")
    snap = SystemSnapshot(**(await client.call("daemon.top")))
    jobs = [p.job_id for p in snap.job_progress]
    if job_id not in jobs:
        print(f"FAIL  daemon.top job_progress lacks {job_id}: {jobs}")
        return 1
    print(f"ok    daemon.top parses as SystemSnapshot ({len(snap.processes)} processes)")
    # Two samples, so the sheet's processes show up as spawn events.
    await asyncio.sleep(1.0)
    events = (await client.call("daemon.events", {"limit": 50}))["events"]
    parsed = [ProcessEvent(**e) for e in events]
    print(f"ok    daemon.events parse as ProcessEvent ({len(parsed)} events)")

    async def first_event() -> dict:
        async for event in client.stream("daemon.monitor.stream"):
            return event
        return {}

    event = await asyncio.wait_for(first_event(), timeout=60)
    for key in ("job_id", "sheet_num", "event", "data", "timestamp"):
        if key not in event:
            print(f"FAIL  monitor.event lacks {key}: {event}")
            return 1
    print(f"ok    daemon.monitor.stream yields {event['event']} for {event['job_id']}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
