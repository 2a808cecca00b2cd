#!/usr/bin/env python3
"""Checks fake_model.py on its own (no agent CLI, no network): python3 tests/agents/test_fake_model.py"""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = {"conversations": [
    {"match": "WORKER", "turns": [
        {"tool": "Bash", "input": {"command": "echo hi"}},
        {"http_error": 500},
        {"text": "worker done"}]},
    {"match": "PATCHER", "turns": [
        {"tool": "apply_patch", "input": "*** Begin Patch\n*** End Patch\n"},
        {"tool": "mcp__echo_srv__echo", "input": {"text": "x"}},
        {"drop": True, "always": True}]},
    {"match": "AIDER", "turns": [{"text": "first"}, {"text": "second"}]},
]}


class FakeModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        script = os.path.join(cls.dir.name, "script.json")
        cls.log = os.path.join(cls.dir.name, "log.jsonl")
        with open(script, "w") as f:
            json.dump(SCRIPT, f)
        cls.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "fake_model.py"), "--script", script,
             "--log", cls.log], stdout=subprocess.PIPE, text=True)
        cls.port = int(cls.proc.stdout.readline().strip().split("=")[1])

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait()
        cls.proc.stdout.close()
        cls.dir.cleanup()

    def post(self, path, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        try:
            data = resp.read().decode()
        except http.client.IncompleteRead as e:
            data = e.partial.decode()
        conn.close()
        return resp.status, data

    def events(self, data):
        return [json.loads(line[6:]) for line in data.splitlines()
                if line.startswith("data: ") and line != "data: [DONE]"]

    def test_anthropic_position_comes_from_assistant_turns(self):
        user = {"role": "user", "content": [{"type": "text", "text": "WORKER go"}]}
        status, data = self.post("/v1/messages?beta=true", {"stream": True, "messages": [user]})
        ev = self.events(data)
        self.assertEqual(status, 200)
        self.assertEqual(ev[1]["content_block"]["name"], "Bash")
        self.assertEqual(ev[-2]["delta"]["stop_reason"], "tool_use")
        self.assertEqual(ev[-1]["type"], "message_stop")
        later = {"stream": True, "messages": [user, {"role": "assistant", "content": "x"}]}
        self.assertEqual(self.post("/v1/messages", later)[0], 500)  # the error step, once
        status, data = self.post("/v1/messages", later)  # the retry gets the next step
        self.assertEqual(self.events(data)[2]["delta"]["text"], "worker done")
        done = {"messages": [user] + [{"role": "assistant", "content": "x"}] * 5}
        self.assertEqual(json.loads(self.post("/v1/messages", done)[1])["content"][0]["text"], "done")

    def test_responses_tool_shapes(self):
        tools = [{"type": "custom", "name": "apply_patch"},
                 {"type": "namespace", "name": "mcp__echo_srv", "tools": []}]
        user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "PATCHER"}]}
        _, data = self.post("/v1/responses", {"stream": True, "tools": tools, "input": [user]})
        item = self.events(data)[-1]["response"]["output"][0]
        self.assertEqual((item["type"], item["name"]), ("custom_tool_call", "apply_patch"))
        self.assertIn("Begin Patch", item["input"])
        call = {"type": "custom_tool_call", "call_id": "c1"}
        _, data = self.post("/v1/responses", {"stream": True, "tools": tools, "input": [user, call]})
        item = self.events(data)[-1]["response"]["output"][0]
        self.assertEqual((item["type"], item["namespace"], item["name"]),
                         ("function_call", "mcp__echo_srv", "echo"))
        # A dropped stream ends without response.completed.
        two = [user, call, {"type": "function_call", "call_id": "c2"}]
        _, data = self.post("/v1/responses", {"stream": True, "tools": tools, "input": two})
        self.assertNotIn("response.completed", data)

    def test_chat_position_is_kept_on_the_server(self):
        body = {"stream": False, "messages": [{"role": "system", "content": "you edit code"},
                                              {"role": "user", "content": "AIDER go"}]}
        first = json.loads(self.post("/v1/chat/completions", body)[1])
        self.assertEqual(first["choices"][0]["message"]["content"], "first")
        commit = {"messages": [{"role": "system", "content": "Write a commit message."},
                               {"role": "user", "content": "diff"}]}
        msg = json.loads(self.post("/v1/chat/completions", commit)[1])
        self.assertTrue(msg["choices"][0]["message"]["content"].startswith("chore"))
        _, data = self.post("/v1/chat/completions", dict(body, stream=True))
        self.assertEqual(self.events(data)[1]["choices"][0]["delta"]["content"], "second")
        self.assertTrue(data.rstrip().endswith("data: [DONE]"))

    def test_every_request_is_logged(self):
        self.post("/v1/messages/count_tokens", {"messages": []})
        with open(self.log) as f:
            lines = [json.loads(line) for line in f]
        self.assertTrue(all({"path", "api", "step", "body", "headers"} <= set(x) for x in lines))
        self.assertIn("anthropic.count_tokens", [x["api"] for x in lines])


if __name__ == "__main__":
    unittest.main()
