"""Drives `mozart mcp` with the official Python MCP client (tests/tests/web_mcp.rs).

Usage: python mcp_client.py <mozart binary> <work dir>
MOZART_HOME / MOZART_SOCKET / PATH come from the environment. Prints each step, then OK.
"""
import asyncio
import json
import os
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

MOZART, WORK = sys.argv[1], sys.argv[2]
TOOLS = {"validate", "run", "status", "list", "pause", "resume", "cancel", "errors", "logs"}


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def check(cond, message):
    if not cond:
        print(f"FAIL: {message}", flush=True)
        sys.exit(1)


async def call(session, tool, **args):
    return await session.call_tool(tool, args)


async def wait_status(session, job_id, wanted, limit=90.0):
    deadline = time.monotonic() + limit
    last = None
    while time.monotonic() < deadline:
        result = await call(session, "status", job_id=job_id)
        check(not result.is_error, f"status {job_id}: {text(result)}")
        last = json.loads(text(result))
        if last["status"] in wanted:
            return last
        await asyncio.sleep(0.3)
    check(False, f"{job_id} never reached {wanted}; last: {last}")


async def main():
    params = StdioServerParameters(command=MOZART, args=["mcp"], env=dict(os.environ), cwd=WORK)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            print(f"step: initialized with server {init.server_info.name}", flush=True)

            tools = {t.name: t for t in (await session.list_tools()).tools}
            check(TOOLS <= set(tools), f"tools: {sorted(tools)}")
            run_schema = tools["run"].input_schema
            check({"path", "yaml"} <= set(run_schema["properties"]), f"run schema: {run_schema}")
            check(tools["status"].input_schema.get("required") == ["job_id"], "status needs job_id")
            print(f"step: tools listed: {sorted(tools)}", flush=True)

            bad = await call(session, "validate", yaml="name: [broken\n")
            check(bad.is_error and "YAML syntax error" in text(bad), f"validate broken: {text(bad)}")
            print("step: validate reports broken YAML as a tool error", flush=True)

            quick = (
                "name: quick\ninstrument: shell\nworkspace: ./quick-ws\n"
                "pause_between_sheets_seconds: 0\n"
                "sheet:\n  size: 1\n  total_items: 2\n"
                "prompt:\n  template: 'RUN: echo hello from sheet {{ sheet_num }}'\n"
            )
            submitted = await call(session, "run", yaml=quick, directory=WORK)
            check(not submitted.is_error, f"run quick: {text(submitted)}")
            job = json.loads(text(submitted))
            check(job["job_id"] == "quick", f"run answered {job}")
            print(f"step: submitted inline score as job {job['job_id']}", flush=True)
            done = await wait_status(session, "quick", {"completed", "failed"})
            check(done["status"] == "completed", f"quick ended {done}")
            check(done["sheets_done"] == 2, f"quick progress {done}")
            print("step: polled quick to completed", flush=True)

            listed = json.loads(text(await call(session, "list")))
            check(any(j["job_id"] == "quick" for j in listed["jobs"]), f"list: {listed}")
            check(listed["total"] >= 1 and "next_offset" not in listed, f"list page: {listed}")
            logs = await call(session, "logs", job_id="quick", sheet=2)
            check("hello from sheet 2" in text(logs), f"logs: {text(logs)}")
            resource = await session.read_resource("mozart://jobs/quick")
            doc = json.loads(resource.contents[0].text)
            check(doc["status"] == "completed", f"resource: {doc}")
            names = [str(r.uri) for r in (await session.list_resources()).resources]
            check("mozart://jobs/quick" in names, f"resources: {names}")
            print("step: list, logs and the job resource agree", flush=True)

            slow_path = os.path.join(WORK, "slow.yaml")
            with open(slow_path, "w") as f:
                f.write(
                    "name: slow\ninstrument: shell\nworkspace: ./slow-ws\n"
                    "sheet:\n  size: 1\n  total_items: 3\n"
                    "prompt:\n  template: 'RUN: sleep 30'\n"
                )
            submitted = await call(session, "run", path=slow_path)
            check(not submitted.is_error, f"run slow: {text(submitted)}")
            await wait_status(session, "slow", {"running"})
            cancelled = await call(session, "cancel", job_id="slow")
            check(not cancelled.is_error and "cancelled" in text(cancelled), f"cancel: {text(cancelled)}")
            await wait_status(session, "slow", {"cancelled"}, limit=30.0)
            print("step: cancelled a second, running job", flush=True)

            again = await call(session, "cancel", job_id="slow")
            check(again.is_error and "mozart list" in text(again), f"cancel twice: {text(again)}")
            unknown = await call(session, "status", job_id="no-such-job")
            check(unknown.is_error and "Score not found: no-such-job" in text(unknown), text(unknown))
            check("Run 'mozart list' to see available scores." in text(unknown), text(unknown))
            print("step: errors carry the CLI's message and hints", flush=True)
    print("OK", flush=True)


asyncio.run(main())
