#!/usr/bin/env python3
"""Drives `warden mcp` with the official Python MCP SDK (a client nobody on the team
wrote) and checks what Warden stored through the CLI (`warden --json ...`).

Usage: python tests/mcp_client.py path/to/warden

In a fresh temporary workspace it lists the tools, performs a legal and an illegal
transition, fails the guard until the task is stuck, retries it with
`new_postchecks: null`, merges memory, sends malformed arguments, and fences an agent
session. Exit 0 when every check passes; the last line is "N passed, 0 failed".
"""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ORCHESTRATOR_TOOLS = {
    "plan_show", "plan_import", "plan_next", "plan_export", "plan_apply", "task_list", "task_get",
    "task_create", "task_update_status", "task_complete", "task_retry", "task_cancel",
    "task_spawn", "memory_get", "memory_merge", "history", "state", "status",
    "task_approve", "task_reject", "task_edit",
}
AGENT_TOOLS = {"task_get", "task_update_status", "task_complete", "memory_get", "memory_merge", "prompt"}

passed = 0


def check(cond, what, detail=""):
    global passed
    if not cond:
        print(f"FAIL: {what}\n{detail}", file=sys.stderr)
        print(f"{passed} passed, 1 failed")
        sys.exit(1)
    passed += 1
    print(f"ok: {what}")


class Cli:
    """The warden CLI in one workspace, with a clean environment."""

    def __init__(self, warden, root):
        self.warden = warden
        self.root = root
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
        self.env["NO_COLOR"] = "1"

    def run(self, *args):
        return subprocess.run([self.warden, *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)

    def json(self, *args):
        p = self.run("--json", *args)
        check(p.returncode == 0, f"warden --json {' '.join(args)} exits 0", p.stderr)
        return json.loads(p.stdout)


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def call(session, name, args):
    return await session.call_tool(name, args)


async def orchestrator(cli):
    params = StdioServerParameters(command=cli.warden, args=["mcp"], cwd=cli.root,
                                   env={"NO_COLOR": "1"})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = (await s.list_tools()).tools
            names = {t.name for t in tools}
            check(names == ORCHESTRATOR_TOOLS, "the orchestrator lists its 21 tools", sorted(names))
            for t in tools:
                check(t.input_schema.get("type") == "object" and len(t.description or "") > 40,
                      f"{t.name} has a JSON schema and a description")

            r = await call(s, "task_create", {
                "id": "py", "title": "Python client task",
                "work": {"shell": "true"}, "prechecks": {"shell": "true"},
                "postchecks": {"shell": "echo guard says no; exit 3"}, "max_attempts": 1,
            })
            check(not r.is_error, "task_create succeeds", text(r))
            check(cli.json("task", "show", "py")["status"] == "pending", "the CLI sees the new task")

            # A legal transition.
            r = await call(s, "task_update_status", {"id": "py", "status": "working"})
            check(not r.is_error and json.loads(text(r))["status"] == "working",
                  "legal transition pending -> working", text(r))
            check(cli.json("task", "show", "py")["status"] == "working", "stored: working")

            # An illegal transition: a tool error with the CLI's one-line message.
            r = await call(s, "task_update_status", {"id": "py", "status": "pending"})
            cli_err = cli.run("task", "update", "py", "--status", "pending")
            check(r.is_error, "illegal transition working -> pending is a tool error", text(r))
            check(text(r).splitlines()[0] == cli_err.stderr.splitlines()[0],
                  "the refusal is the CLI's message", f"{text(r)!r} vs {cli_err.stderr!r}")
            check(cli.json("task", "show", "py")["version"] == 2, "a refusal stores nothing")

            # The guard fails at the last attempt: stuck.
            r = await call(s, "task_update_status", {"id": "py", "status": "done"})
            check(r.is_error and "guard says no" in text(r), "a failing guard returns its output", text(r))
            check(cli.json("task", "show", "py")["status"] == "stuck", "stored: stuck")

            # Retry with new_postchecks: null removes the guard and keeps the prechecks.
            r = await call(s, "task_retry", {"id": "py", "new_postchecks": None})
            check(not r.is_error, "task_retry with new_postchecks null succeeds", text(r))
            t = cli.json("task", "show", "py")
            check(t["status"] == "working" and t["attempts"] == 0, "stored: working, attempts reset", t)
            check(t["spec"]["postchecks"] is None, "stored: postchecks removed", t["spec"])
            check(t["spec"]["prechecks"] == {"shell": "true"}, "stored: prechecks kept", t["spec"])
            r = await call(s, "task_update_status", {"id": "py", "status": "done"})
            check(not r.is_error, "without a guard the task is done", text(r))

            # Memory merge.
            r = await call(s, "memory_merge", {"id": "py", "decisions": ["drop the broken guard"],
                                               "next_focus": "ship it"})
            check(not r.is_error, "memory_merge succeeds", text(r))
            m = cli.json("memory", "show", "py")
            check(m["decisions"] == ["drop the broken guard"] and m["next_focus"] == "ship it",
                  "stored: the merged memory", m)

            # Malformed arguments are errors and the server keeps serving.
            for args, why in [({"id": 42}, "a wrong type"), ({"id": "ghost"}, "an unknown task"),
                              ({"id": "py", "bogus": 1}, "an unknown key"),
                              ({"id": "x" * ((1 << 20) + 1)}, "a huge string")]:
                r = await call(s, "task_get", args)
                check(r.is_error, f"task_get with {why} is a tool error", text(r)[:300])
            r = await call(s, "task_get", {"id": "py"})
            check(not r.is_error and json.loads(text(r))["status"] == "done", "the server still serves")

            # Resources: STATE.md is what the CLI prints.
            res = await s.read_resource("warden://state")
            check(res.contents[0].text == cli.run("state").stdout, "warden://state is STATE.md")
    p = cli.run("--json", "check")
    check(p.returncode == 0 and json.loads(p.stdout)["ok"], "warden check replays the history", p.stdout)


async def agent(cli):
    for args in (["task", "create", "mine", "--agent", "work"], ["task", "create", "theirs", "--agent", "x"],
                 ["task", "update", "mine", "--status", "working"]):
        p = cli.run(*args)
        check(p.returncode == 0, f"warden {' '.join(args)}", p.stderr)
    params = StdioServerParameters(command=cli.warden, args=["mcp"], cwd=cli.root,
                                   env={"WARDEN_ROLE": "worker", "WARDEN_TASK_ID": "mine"})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            check(names == AGENT_TOOLS, "an agent session lists only its 6 tools", sorted(names))
            r = await call(s, "task_update_status", {"id": "theirs", "status": "working"})
            check(r.is_error, "an agent cannot move another task", text(r))
            r = await call(s, "task_update_status", {"status": "done"})
            check(r.is_error, "a worker cannot request done", text(r))
            r = await call(s, "task_cancel", {"id": "mine"})
            check(r.is_error, "an agent cannot call an orchestrator tool", text(r))
    check(cli.json("task", "show", "theirs")["status"] == "pending", "the other task is untouched")
    events = [json.loads(line) for line in cli.run("--json", "history", "mine").stdout.splitlines() if line]
    fields = [e["data"]["field"] for e in events if e["type"] == "tamper.ignored"]
    check(fields == ["mcp:task_update_status", "mcp:task_update_status", "mcp:task_cancel"],
          "every refusal is recorded as tamper.ignored on the agent's task", fields)


async def main():
    if len(sys.argv) != 2:
        print("usage: mcp_client.py path/to/warden", file=sys.stderr)
        sys.exit(2)
    warden = os.path.abspath(sys.argv[1])
    root = tempfile.mkdtemp(prefix="warden-mcp-py-")
    try:
        cli = Cli(warden, root)
        p = cli.run("init")
        check(p.returncode == 0, "warden init", p.stderr)
        await orchestrator(cli)
        await agent(cli)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    asyncio.run(main())
