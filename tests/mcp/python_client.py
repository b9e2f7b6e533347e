"""Drives `awr mcp` with the official MCP SDK for Python, as any Python
agent would, and prints what each step answered as one JSON object; the
Rust test (tests/e2e/mcp_python.rs) checks every answer against the run's
log.

Usage: python_client.py AWR STORAGE ROOT
  AWR      the awr binary
  STORAGE  its --storage
  ROOT     a directory holding summarize.yaml (and its fixtures) and
           gated.yaml, whose command step waits for ROOT/gate
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def call(session, tool, arguments):
    """The structured answer of a tool that succeeded."""
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content}")
    return result.structured_content


async def settle(session, run):
    """wait_run until the run settles (each call bounded by the server)."""
    for _ in range(20):
        waited = await call(session, "wait_run", {"runId": run, "timeoutSeconds": 10})
        if not waited["timedOut"]:
            return waited
    raise SystemExit(f"run {run} did not settle")


async def main(awr, storage, root):
    params = StdioServerParameters(
        command=awr,
        args=["--storage", storage, "mcp", "--root", root],
        cwd=root,
        env={"PATH": os.environ.get("PATH", "")},
    )
    said = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            info = await session.initialize()
            said["server"] = info.server_info.name
            tools = await session.list_tools()
            said["tools"] = sorted(tool.name for tool in tools.tools)

            # A run started, waited for, and its events read from an offset.
            started = await call(session, "start_run", {"path": "summarize.yaml"})
            run = started["runId"]
            said["run"] = run
            said["waited"] = await settle(session, run)
            said["page"] = await call(
                session, "events_since", {"runId": run, "offset": 2, "limit": 3}
            )

            # Another run paused while it works, then resumed.
            gated = (await call(session, "start_run", {"path": "gated.yaml"}))["runId"]
            said["gated"] = gated
            for _ in range(600):
                page = await call(
                    session, "events_since", {"runId": gated, "types": ["node:started"]}
                )
                if page["events"]:
                    break
                await asyncio.sleep(0.05)
            said["paused"] = await call(session, "pause", {"runId": gated})
            said["waitedPaused"] = await settle(session, gated)
            with open(os.path.join(root, "gate"), "w"):
                pass
            said["resumed"] = await call(
                session, "resume", {"runId": gated, "message": "go on"}
            )
            said["waitedResumed"] = await settle(session, gated)

            # A refusal is a tool error, not a broken connection.
            refused = await session.call_tool("get_run", {"runId": "ffffffff"})
            said["refused"] = {
                "isError": refused.is_error,
                "structured": refused.structured_content,
            }
    print(json.dumps(said))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
