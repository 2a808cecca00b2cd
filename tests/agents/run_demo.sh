#!/usr/bin/env bash
# One scripted Claude Code run, end to end, with no model and no network.
#
#   tests/agents/run_demo.sh            (as root: it makes a loopback-only network namespace)
#
# It installs the pinned Claude Code if needed (scripts/install-agents claude), then, in a
# network namespace that has only loopback:
#   1. starts tests/agents/fake_model.py with a script for one conversation;
#   2. runs `claude -p PROMPT --session-id UUID` in a scratch directory whose
#      .claude/settings.json has a Stop hook (blocks the first stop, telling the model to
#      write HANDOFF.md) and a SessionEnd hook (records its input);
#   3. the scripted model writes hello.txt (Write), runs a shell command (Bash), says it is
#      done, is blocked by the hook, writes HANDOFF.md, and stops;
#   4. resumes the session with `claude -p PROMPT2 --resume UUID` and checks that the
#      model's request carries the first run's messages.
# Each step's result is checked; the script exits non-zero if any check fails.
# Set KEEP=1 to keep the scratch directory.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

# Outside the namespace: find (or install) claude, then re-run this script inside it.
if [[ ${WARDEN_DEMO_IN_NETNS:-} != 1 ]]; then
  claude_bin=$("$repo/scripts/install-agents" claude | sed -n 's/^claude=//p')
  WARDEN_DEMO_IN_NETNS=1 CLAUDE_BIN=$claude_bin exec "$here/netns.sh" "$0" "$@"
fi

tmp=$(mktemp -d /tmp/warden-demo.XXXXXX)
work=$tmp/work
mkdir -p "$work/.claude" "$tmp/home"
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null || true
  [[ ${KEEP:-} == 1 ]] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

# The model's script. Paths are absolute: Claude's Write tool wants them so.
cat >"$tmp/script.json" <<EOF
{"conversations": [{"match": "DEMO-WORKER", "turns": [
  {"tool": "Write", "input": {"file_path": "$work/hello.txt", "content": "hello\n"}},
  {"tool": "Bash", "input": {"command": "echo ran > bash.txt && ls"}},
  {"text": "All done."},
  {"tool": "Write", "input": {"file_path": "$work/HANDOFF.md", "content": "## Handoff\nhello.txt written\n"}},
  {"text": "Handoff written."},
  {"text": "Second prompt answered."}
]}]}
EOF

# Hooks: Stop blocks once (stop_hook_active is true on the stop that follows a block).
cat >"$tmp/stop-hook.sh" <<EOF
#!/usr/bin/env bash
input=\$(cat)
echo "\$input" >>"$tmp/stop-hook.jsonl"
if ! grep -q '"stop_hook_active":true' <<<"\$input" && [[ ! -e $work/HANDOFF.md ]]; then
  echo '{"decision": "block", "reason": "Write HANDOFF.md before you stop."}'
fi
EOF
cat >"$tmp/end-hook.sh" <<EOF
#!/usr/bin/env bash
cat >>"$tmp/session-end.jsonl"; echo >>"$tmp/session-end.jsonl"
EOF
chmod +x "$tmp"/*.sh
cat >"$work/.claude/settings.json" <<EOF
{"hooks": {
  "Stop": [{"hooks": [{"type": "command", "command": "$tmp/stop-hook.sh"}]}],
  "SessionEnd": [{"hooks": [{"type": "command", "command": "$tmp/end-hook.sh"}]}]
}}
EOF

step "fake model"
coproc SERVER { exec python3 "$here/fake_model.py" --script "$tmp/script.json" --log "$tmp/requests.jsonl" --port 0; }
server_pid=$SERVER_PID
read -r line <&"${SERVER[0]}"
port=${line#port=}
echo "listening on 127.0.0.1:$port"

# The environment that keeps Claude Code on the fake model and off the network.
export HOME=$tmp/home
export ANTHROPIC_BASE_URL=http://127.0.0.1:$port ANTHROPIC_API_KEY=fake-key
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1
export CLAUDE_CODE_MAX_RETRIES=0  # a failing model ends the run at once (exit 1)
session=$(python3 -c 'import uuid; print(uuid.uuid4())')
cd "$work"

step "claude -p ... --session-id $session"
set +e
"$CLAUDE_BIN" -p "DEMO-WORKER: write hello.txt" --session-id "$session" \
  --allowedTools "Bash Write Edit" --output-format json >"$tmp/run1.json"
rc=$?
set -e
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("exit", sys.argv[2], "| result:", r["result"], "| session_id:", r["session_id"])' "$tmp/run1.json" "$rc"
[[ $rc == 0 ]] || fail "claude exited $rc"
[[ -f $work/hello.txt ]] || fail "hello.txt was not written"
[[ -f $work/bash.txt ]] || fail "the Bash command did not run"
[[ -f $work/HANDOFF.md ]] || fail "the Stop hook did not make the model continue"
echo "files: $(cd "$work" && ls | tr '\n' ' ')"
echo "Stop hook calls: $(wc -l <"$tmp/stop-hook.jsonl") (the first blocked)"
echo "SessionEnd input: $(head -1 "$tmp/session-end.jsonl")"

step "claude -p ... --resume $session"
"$CLAUDE_BIN" -p "DEMO-WORKER: a second prompt" --resume "$session" \
  --allowedTools "Bash Write Edit" --output-format json >"$tmp/run2.json"
python3 -c 'import json,sys; print("result:", json.load(open(sys.argv[1]))["result"])' "$tmp/run2.json"

step "what the model was sent (one line per request: position, step answered)"
python3 - "$tmp/requests.jsonl" <<'EOF'
import json, sys
reqs = [json.loads(line) for line in open(sys.argv[1])]
for r in reqs:
    print(f"  {r['position']}  {json.dumps(r['step'])[:90]}")
def text(m):
    c = m["content"]
    return c if isinstance(c, str) else " ".join(b.get("text", "") for b in c if isinstance(b, dict))
blocked = reqs[3]["body"]["messages"]
assert any("Write HANDOFF.md" in text(m) for m in blocked if m["role"] == "user"), "hook reason not sent"
last = reqs[-1]["body"]["messages"]
firsts = [m for m in last if m["role"] == "user" and "write hello.txt" in text(m)]
assert firsts, "the resumed request does not carry the first prompt"
print("the Stop hook's reason reached the model; the resumed request carries the first run")
EOF
step "ok"
