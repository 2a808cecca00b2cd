#!/usr/bin/env python3
"""A scripted fake model server for driving real agent CLIs without a model or network.

Serves on 127.0.0.1 (standard library only):
  POST /v1/messages[?beta=true]      Anthropic Messages, SSE or JSON    (Claude Code)
  POST /v1/messages/count_tokens     Anthropic token counting
  POST /v1/responses                 OpenAI Responses, SSE or JSON      (Codex)
  POST /v1/chat/completions          OpenAI Chat Completions, SSE/JSON  (aider)
  GET  /v1/models[/ID]               a one-model listing
Anything else is answered 404 (and logged, so a test can see what a CLI asked for).

Usage:
  fake_model.py --script SCRIPT.json --log REQUESTS.jsonl [--port N]
With --port 0 (the default) a free port is picked. The first line on stdout is always
`port=N` (flushed), so a test can start the server and read where it listens.

SCRIPT.json:
  {"conversations": [
     {"match": "ROLE=worker",            # substring of the system prompt / first user message
      "turns": [                          # the model's steps, in order
        {"tool": "Bash", "input": {"command": "echo hi > out.txt"}},
        {"text": "Finished."},
        {"http_error": 500},              # answer this request with HTTP 500
        {"drop": true},                   # start the stream, then close the connection
        ...]}]}
Any step may also carry "delay": SECONDS, a wait before anything is sent (a model that
never answers), or "stall": SECONDS, a wait after the stream's first event (a stream
that goes quiet).
A top-level list is read as the list of conversations. An error step is served once
(add "times": N to serve it N times, or "always": true to serve it forever) and then the
step after it. When a conversation's turns run out it answers the text "done".

Which conversation: the first whose `match` occurs in the system prompt or the first
user message; failing that, the first whose `match` occurs in any user message (aider
and Codex put canned or environment messages first). No match: the text "done".

Where a conversation is (how many model steps it has already taken) is read from the
request itself, so resumed sessions and retried requests land on the right step:
  Anthropic: the number of assistant messages in `messages`;
  Responses: the number of function/custom tool calls plus assistant messages in `input`;
  Chat:      kept on the server per conversation (aider sends canned assistant turns).
Error steps are counted on the server (they leave no trace in the request).

Tool steps, per API:
  Anthropic: a `tool_use` block (name and input as given).
  Responses: a `function_call` with JSON `arguments`; when the request declares the tool
    as a custom (freeform) tool, e.g. apply_patch, a `custom_tool_call` whose `input`
    is the step's input string. `mcp__SERVER__TOOL` becomes name TOOL in namespace
    mcp__SERVER (unless the request declares a tool by that very name); "namespace" in
    the step sets it explicitly.
  Chat: a `tool_calls` entry (aider has no tools: give it text with SEARCH/REPLACE).
Aider's separate commit-message request (its system prompt mentions "commit message")
is answered with COMMIT_MESSAGE and does not move the script.

Every request is appended to the log as one JSON line: time, method, path, api,
conversation index, position, the step answered, the request headers and its body.
"""

import argparse
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT_MESSAGE = "chore: apply scripted edit"
DONE = {"text": "done"}
MODEL_ID = "fake-model"


class Script:
    """The conversations, plus the little state the server must keep itself."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        convs = data["conversations"] if isinstance(data, dict) else data
        self.conversations = [
            {"match": c.get("match", ""), "turns": list(c.get("turns", []))} for c in convs
        ]
        self.lock = threading.RLock()
        self.errors_served = {}  # (conversation, position) -> error steps served there
        self.chat_position = {}  # conversation -> model steps taken (Chat API only)

    def find(self, first_texts, all_user_texts):
        """Index of the conversation a request belongs to, or None."""
        for haystack in (first_texts, all_user_texts):
            text = "\n".join(haystack)
            for i, conv in enumerate(self.conversations):
                if conv["match"] in text:
                    return i
        return None

    def step(self, conv, position):
        """The step to answer for conversation `conv` after `position` model steps.

        Error steps (http_error, drop) sit between model steps; the ones just before the
        next model step are served first, counted here, then the model step itself."""
        if conv is None:
            return DONE
        turns = self.conversations[conv]["turns"]
        i, seen = 0, 0  # walk to the run of error steps before model step `position`
        while i < len(turns) and seen < position:
            if not is_error(turns[i]):
                seen += 1
            i += 1
        with self.lock:
            served = self.errors_served.get((conv, position), 0)
            budget = 0
            while i < len(turns) and is_error(turns[i]):
                if turns[i].get("always"):
                    return turns[i]
                budget += int(turns[i].get("times", 1))
                if served < budget:
                    self.errors_served[(conv, position)] = served + 1
                    return turns[i]
                i += 1
        return turns[i] if i < len(turns) else DONE


def is_error(step):
    return "http_error" in step or "drop" in step


def text_of(content):
    """All text in a message's content (a string or a list of blocks/parts)."""
    if isinstance(content, str):
        return content
    out = []
    for part in content or []:
        if isinstance(part, dict):
            for key in ("text", "content", "input_text"):
                if isinstance(part.get(key), (str, list)):
                    out.append(text_of(part[key]))
    return "\n".join(out)


# --- reading a request: (first texts, all user texts, position) per API -------------


def read_anthropic(body):
    msgs = body.get("messages", [])
    users = [text_of(m.get("content")) for m in msgs if m.get("role") == "user"]
    first = [text_of(body.get("system"))] + users[:1]
    position = sum(1 for m in msgs if m.get("role") == "assistant")
    return first, users, position


def read_responses(body):
    items = body.get("input", [])
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    users = [text_of(it.get("content")) for it in items if it.get("role") == "user"]
    system = [text_of(it.get("content")) for it in items if it.get("role") in ("system", "developer")]
    first = [body.get("instructions") or ""] + system + users[:1]
    position = sum(
        1
        for it in items
        if it.get("type") in ("function_call", "custom_tool_call", "local_shell_call")
        or (it.get("type", "message") == "message" and it.get("role") == "assistant")
    )
    return first, users, position


def read_chat(body):
    msgs = body.get("messages", [])
    system = [text_of(m.get("content")) for m in msgs if m.get("role") in ("system", "developer")]
    users = [text_of(m.get("content")) for m in msgs if m.get("role") == "user"]
    return system + users[:1], users, None  # position: kept on the server


# --- the handler --------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-model/1"

    def log_message(self, *args):  # quiet: everything goes to the JSON log instead
        pass

    # Plain JSON answers keep the connection alive; streams close it when done.
    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_truncated_json(self, obj):
        """A JSON answer cut off half way: the connection closes before Content-Length."""
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.close_connection = True

    def start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def sse(self, event, data):
        if event:
            self.wfile.write(f"event: {event}\n".encode())
        payload = data if isinstance(data, str) else json.dumps(data)
        self.wfile.write(f"data: {payload}\n\n".encode())
        self.wfile.flush()

    def record(self, api, body, conv=None, position=None, step=None):
        srv = self.server
        line = {
            "time": round(time.time(), 3),
            "method": self.command,
            "path": self.path,
            "api": api,
            "conversation": conv,
            "position": position,
            "step": step,
            "headers": dict(self.headers.items()),
            "body": body,
        }
        with srv.log_lock, open(srv.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def do_GET(self):
        path = self.path.split("?")[0]
        self.record("get", None)
        if path.rstrip("/").endswith("/models"):
            model = {"id": MODEL_ID, "object": "model", "type": "model", "created": 0,
                     "owned_by": "fake", "display_name": MODEL_ID,
                     "created_at": "2025-01-01T00:00:00Z"}
            self.send_json(200, {"object": "list", "data": [model], "has_more": False,
                                 "first_id": MODEL_ID, "last_id": MODEL_ID, "models": []})
        elif "/models/" in path:
            name = path.rsplit("/", 1)[1]
            self.send_json(200, {"id": name, "object": "model", "type": "model",
                                 "display_name": name, "created_at": "2025-01-01T00:00:00Z"})
        else:
            self.send_json(404, {"error": {"type": "not_found", "message": path}})

    def do_HEAD(self):
        self.record("head", None)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        body = self.read_body()
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/messages/count_tokens"):
            self.record("anthropic.count_tokens", body)
            return self.send_json(200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
        if path.endswith("/messages"):
            return self.answer("anthropic", body, read_anthropic, self.write_anthropic)
        if path.endswith("/responses"):
            return self.answer("responses", body, read_responses, self.write_responses)
        if path.endswith("/chat/completions"):
            if is_commit_message_request(body):
                step = {"text": COMMIT_MESSAGE}
                self.record("chat.commit_message", body, step=step)
                return self.write_chat(body, step)
            return self.answer("chat", body, read_chat, self.write_chat)
        self.record("unknown", body)
        self.send_json(404, {"error": {"type": "not_found", "message": self.path}})

    def answer(self, api, body, read, write):
        script = self.server.script
        first, users, position = read(body)
        conv = script.find(first, users)
        if position is None:  # Chat API: the server keeps the position
            with script.lock:
                position = script.chat_position.get(conv, 0)
                step = script.step(conv, position)
                if not is_error(step):
                    script.chat_position[conv] = position + 1
        else:
            step = script.step(conv, position)
        self.record(api, body, conv, position, step)
        if step.get("delay"):  # a slow or hung model: wait before answering at all
            time.sleep(float(step["delay"]))
        if "http_error" in step:
            status = int(step["http_error"])
            msg = step.get("message", f"scripted error {status}")
            if api == "anthropic":
                err = {"type": "error", "error": {"type": "api_error", "message": msg}}
            else:
                err = {"error": {"type": "server_error", "message": msg, "code": None}}
            return self.send_json(status, err)
        if step.get("drop") and not body.get("stream"):
            return self.send_truncated_json({"id": "cut", "content": [], "choices": []})
        write(body, step)

    # --- Anthropic Messages -------------------------------------------------------

    def write_anthropic(self, body, step):
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        if "tool" in step:
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24],
                     "name": step["tool"], "input": step.get("input", {})}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": step.get("text", "")}
            stop = "end_turn"
        usage = {"input_tokens": 10, "output_tokens": 10, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        message = {"id": msg_id, "type": "message", "role": "assistant",
                   "model": body.get("model", MODEL_ID), "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            message.update(content=[block], stop_reason=stop)
            return self.send_json(200, message)
        self.start_sse()
        self.sse("message_start", {"type": "message_start", "message": message})
        time.sleep(float(step.get("stall", 0)))
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = dict(block, input={})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        self.sse("content_block_start",
                 {"type": "content_block_start", "index": 0, "content_block": start})
        if step.get("drop"):
            return  # the connection closes here, mid-stream
        self.sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        self.sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        self.sse("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": 10}})
        self.sse("message_stop", {"type": "message_stop"})

    # --- OpenAI Responses ---------------------------------------------------------

    def write_responses(self, body, step):
        resp_id = "resp_" + uuid.uuid4().hex[:24]
        item_id = uuid.uuid4().hex[:24]
        if "tool" in step:
            item = responses_tool_item(body, step, item_id)
        else:
            item = {"type": "message", "id": "msg_" + item_id, "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": step.get("text", ""),
                                 "annotations": []}]}
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 20}
        response = {"id": resp_id, "object": "response", "created_at": int(time.time()),
                    "status": "in_progress", "model": body.get("model", MODEL_ID),
                    "output": [], "usage": None}
        if not body.get("stream"):
            response.update(status="completed", output=[item], usage=usage)
            return self.send_json(200, response)
        self.start_sse()
        seq = iter(range(1_000_000))  # sequence_number, as the real API sends

        def ev(kind, **fields):
            self.sse(kind, dict(type=kind, sequence_number=next(seq), **fields))

        ev("response.created", response=response)
        time.sleep(float(step.get("stall", 0)))
        ev("response.in_progress", response=response)
        if item["type"] == "message":
            ev("response.output_item.added", output_index=0, item=dict(item, content=[],
                                                                         status="in_progress"))
            if step.get("drop"):
                return  # the connection closes here, mid-stream
            ev("response.output_text.delta", item_id=item["id"], output_index=0,
               content_index=0, delta=item["content"][0]["text"])
        else:
            ev("response.output_item.added", output_index=0, item=item)
            if step.get("drop"):
                return
        ev("response.output_item.done", output_index=0, item=item)
        ev("response.completed", response=dict(response, status="completed", output=[item],
                                               usage=usage))

    # --- OpenAI Chat Completions --------------------------------------------------

    def write_chat(self, body, step):
        chat_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        base = {"id": chat_id, "created": int(time.time()), "model": body.get("model", MODEL_ID)}
        usage = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
        if "tool" in step:
            call = {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                    "function": {"name": step["tool"],
                                 "arguments": json.dumps(step.get("input", {}))}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": step.get("text", "")}
            finish = "stop"
        if not body.get("stream"):
            return self.send_json(200, dict(base, object="chat.completion", usage=usage,
                                            choices=[{"index": 0, "message": message,
                                                      "finish_reason": finish}]))
        self.start_sse()

        def chunk(delta, finish_reason=None, **extra):
            self.sse(None, dict(base, object="chat.completion.chunk", **extra,
                                choices=[{"index": 0, "delta": delta,
                                          "finish_reason": finish_reason}]))

        chunk({"role": "assistant", "content": ""})
        time.sleep(float(step.get("stall", 0)))
        if step.get("drop"):
            return  # the connection closes here, mid-stream
        if "tool_calls" in message:
            chunk({"tool_calls": [dict(message["tool_calls"][0], index=0)]})
        else:
            chunk({"content": message["content"]})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            self.sse(None, dict(base, object="chat.completion.chunk", choices=[], usage=usage))
        self.sse(None, "[DONE]")


def responses_tool_item(body, step, item_id):
    """A Responses output item calling step["tool"], in the shape the request's tools ask."""
    name, namespace = step["tool"], step.get("namespace")
    tools = body.get("tools") or []
    declared = {t.get("name"): t for t in tools if isinstance(t, dict)}
    m = re.fullmatch(r"(mcp__[^_]+(?:_[^_]+)*?)__(.+)", name)
    if namespace is None and m and name not in declared:
        # Codex lists MCP tools as a namespace (or defers them behind tool_search, for
        # known models); either way it takes a call to TOOL in namespace mcp__SERVER.
        namespace, name = m.group(1), m.group(2)
    call_id = "call_" + item_id
    if (declared.get(name) or {}).get("type") == "custom":
        raw = step.get("input", "")
        text = raw if isinstance(raw, str) else raw.get("input") or raw.get("patch", "")
        return {"type": "custom_tool_call", "id": "ctc_" + item_id, "call_id": call_id,
                "name": name, "input": text, "status": "completed"}
    item = {"type": "function_call", "id": "fc_" + item_id, "call_id": call_id, "name": name,
            "arguments": json.dumps(step.get("input", {})), "status": "completed"}
    if namespace:
        item["namespace"] = namespace
    return item


def is_commit_message_request(body):
    for m in body.get("messages", []):
        if m.get("role") == "system" and "commit message" in text_of(m.get("content")).lower():
            return True
    return False


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hangs up (after a drop, or when a CLI is killed) is not news.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--script", required=True, help="JSON file of conversations")
    ap.add_argument("--log", required=True, help="JSON-lines file every request is appended to")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: pick one)")
    args = ap.parse_args()

    server = Server(("127.0.0.1", args.port), Handler)
    server.script = Script(args.script)
    server.log_path = args.log
    server.log_lock = threading.Lock()
    print(f"port={server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
