"""Run upstream's `mozart top` TUI (Textual, headless) against our conductor.

    python tui.py SOCKET JOB_ID

Passes when the app, fed only by our conductor, shows the conductor as up, the job with its
sheet progress (from `daemon.top`), and process events of its sheets in the timeline (from
`daemon.events`). Uses upstream's package as a
library; contains none of its code.
"""

import asyncio
import html
import re
import sys
from pathlib import Path

from mozart.daemon.ipc.client import DaemonClient
from mozart.tui.app import MonitorApp
from mozart.tui.reader import MonitorReader


async def main(socket: str, job_id: str) -> int:
    reader = MonitorReader(ipc_client=DaemonClient(Path(socket)))
    app = MonitorApp(reader=reader, refresh_interval=1.0)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(40):
            await pilot.pause(0.25)
            snap = app._latest_snapshot
            if snap is not None and any(j.job_id == job_id for j in snap.job_progress):
                break
        svg = app.export_screenshot()
        screen = html.unescape("".join(re.findall(r"<text[^>]*>(.*?)</text>", svg)))
        screen = screen.replace("\xa0", " ")
        if not app._conductor_up:
            print("FAIL  the TUI says the conductor is down")
            return 1
        if app._latest_snapshot is None:
            print("FAIL  the TUI got no snapshot")
            return 1
        for wanted in ("Conductor: UP", f"{job_id}  Sheet", f"{job_id}/S"):
            if wanted not in screen:
                print(f"FAIL  the TUI screen lacks {wanted!r}: {screen[:2000]}")
                return 1
    print(f"ok    upstream's TUI shows {job_id} from our conductor")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
