#!/usr/bin/env python3
"""A tiny MCP server on stdio (standard library only) with one tool, `echo`.

Speaks newline-delimited JSON-RPC 2.0: initialize, tools/list, tools/call, ping.
Every message it receives is appended as one JSON line to the file given as the first
argument (or $MCP_ECHO_LOG), so a test can check that an agent's call reached it.

Usage: mcp_echo.py [LOG_FILE]
"""

import json
import os
import sys

LOG = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MCP_ECHO_LOG")

TOOL = {
    "name": "echo",
    "description": "Returns the text it is given.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "what to echo"}},
        "required": ["text"],
    },
}


def result_for(method, params):
    """The result of a request, or None for an unknown method."""
    if method == "initialize":
        return {
            # Answer with the client's own protocol version: every version has these calls.
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "mcp-echo", "version": "1.0.0"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        text = (params.get("arguments") or {}).get("text", "")
        return {"content": [{"type": "text", "text": f"echo: {text}"}], "isError": False}
    if method == "ping":
        return {}
    return None


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if LOG:
            with open(LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps(msg) + "\n")
        if "id" not in msg or "method" not in msg:
            continue  # a notification (e.g. notifications/initialized) or a response
        result = result_for(msg["method"], msg.get("params") or {})
        if result is None:
            reply = {"jsonrpc": "2.0", "id": msg["id"],
                     "error": {"code": -32601, "message": f"unknown method {msg['method']}"}}
        else:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": result}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
