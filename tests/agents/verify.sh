#!/usr/bin/env bash
# Re-checks, against the installed pinned agent programs and fake_model.py, the facts that
# NOTES.md records (run it after changing a pinned version). Everything runs in a network
# namespace with only loopback. Prints one PASS/FAIL line per fact; exits 1 if any failed.
#
#   tests/agents/verify.sh [claude|codex|aider]...     (default: all three; needs root)
# Set KEEP=1 to keep the scratch directory (each check's requests.jsonl is in it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [[ ${WARDEN_VERIFY_IN_NETNS:-} != 1 ]]; then
  want=("$@"); [[ ${#want[@]} -gt 0 ]] || want=(claude codex aider)
  bins=$("$repo/scripts/install-agents" "${want[@]}")
  WARDEN_VERIFY_IN_NETNS=1 WARDEN_VERIFY_BINS=$bins exec "$here/netns.sh" "$0" "${want[@]}"
fi
while IFS== read -r name path; do printf -v "BIN_${name}" '%s' "$path"; done <<<"$WARDEN_VERIFY_BINS"

root=$(mktemp -d /tmp/warden-verify.XXXXXX)
trap '[[ ${KEEP:-} == 1 ]] && echo "kept $root" || rm -rf "$root"' EXIT
failures=0
pass() { printf 'PASS  %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; failures=$((failures + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

# new_case NAME SCRIPT_JSON: a scratch dir (D, D/work, HOME) and a fake model on PORT.
new_case() {
  D=$root/$1; mkdir -p "$D/work" "$D/home"; printf '%s' "$2" >"$D/script.json"
  python3 "$here/fake_model.py" --script "$D/script.json" --log "$D/requests.jsonl" >"$D/port" &
  SERVER=$!
  for _ in $(seq 100); do [[ -s $D/port ]] && break; sleep 0.05; done
  PORT=$(sed -n 's/^port=//p' "$D/port")
  export HOME=$D/home
  cd "$D/work"
}
end_case() { kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; cd "$root"; }
# req N EXPR: evaluate a Python expression on request N of the log (r = the JSON line).
req() { python3 -c 'import json,sys; rs=[json.loads(l) for l in open(sys.argv[1])]; r=rs[int(sys.argv[2])]; sys.exit(0 if eval(sys.argv[3]) else 1)' "$D/requests.jsonl" "$1" "$2"; }
nreq() { wc -l <"$D/requests.jsonl"; }
big_prompt() { python3 -c 'import sys; sys.stdout.write("BIG-PROMPT\n" + "filler line of a long prompt\n" * 7000 + "BIG-END\n")'; }
hooks_json() { # EVENT=COMMAND ... -> a hooks file body (Claude's and Codex's shape)
  python3 -c 'import json,sys; print(json.dumps({"hooks": {a.split("=",1)[0]: [{"hooks": [{"type": "command", "command": a.split("=",1)[1]}]}] for a in sys.argv[1:]}}))' "$@"
}
# A Stop hook that blocks the first stop of a turn and records every input it gets.
cat >"$root/stop-hook.sh" <<'EOF'
#!/usr/bin/env bash
in=$(cat); echo "$in" >>"$PWD/../stop.jsonl"
grep -q '"stop_hook_active":true' <<<"$in" || echo '{"decision":"block","reason":"HOOK-REASON write HANDOFF"}'
EOF
cat >"$root/end-hook.sh" <<'EOF'
#!/usr/bin/env bash
cat >>"$PWD/../end.jsonl"; echo >>"$PWD/../end.jsonl"
EOF
chmod +x "$root"/*.sh

verify_claude() {
  local C=$BIN_claude T="--allowedTools"
  export ANTHROPIC_API_KEY=fake CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1
  local sid=6f1c2a3e-1111-4222-8333-944455556666

  new_case claude-worker '{"conversations":[{"match":"W1","turns":[
    {"tool":"Write","input":{"file_path":"'"$root"'/claude-worker/work/a.txt","content":"a"}},
    {"tool":"Bash","input":{"command":"echo b > b.txt"}},{"text":"first done"},
    {"text":"second done"}]}]}'
  export ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT
  "$C" -p "W1 write" --session-id $sid $T "Bash Write Edit" >/dev/null
  check "claude: Write + Bash run with --allowedTools \"Bash Write Edit\" as root" test -f a.txt -a -f b.txt
  "$C" -p "W1 again" --resume $sid $T "Bash Write Edit" >/dev/null
  check "claude: --resume sends the first run's messages" req -1 '"W1 write" in json.dumps(r["body"]["messages"]) and r["position"] == 3'
  check "claude: --session-id is sent as X-Claude-Code-Session-Id" req 0 "r['headers'].get('X-Claude-Code-Session-Id') == '$sid'"
  end_case

  new_case claude-noperm '{"conversations":[{"match":"W2","turns":[{"tool":"Bash","input":{"command":"echo b > b.txt"}}]}]}'
  export ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT
  local rc=0; "$C" -p "W2" >/dev/null || rc=$?
  check "claude: without permission flags the tool is refused and claude exits 0" test ! -e b.txt -a $rc = 0
  rc=0; "$C" -p "W2" --dangerously-skip-permissions >/dev/null 2>&1 || rc=$?
  check "claude: --dangerously-skip-permissions as root without IS_SANDBOX=1 exits 1" test $rc = 1
  IS_SANDBOX=1 "$C" -p "W2" --permission-mode bypassPermissions >/dev/null
  check "claude: IS_SANDBOX=1 --permission-mode bypassPermissions runs tools" test -f b.txt
  end_case

  new_case claude-hooks '{"conversations":[{"match":"W3","turns":[{"text":"stopping"},
    {"tool":"Write","input":{"file_path":"'"$root"'/claude-hooks/work/HANDOFF","content":"h"}},{"text":"ok"}]}]}'
  export ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT
  mkdir .claude; hooks_json "Stop=$root/stop-hook.sh" "SessionEnd=$root/end-hook.sh" >.claude/settings.json
  "$C" -p "W3" $T "Bash Write Edit" >/dev/null
  check "claude: a Stop hook's {\"decision\":\"block\"} sends its reason to the model and the turn goes on" \
    req 1 '"HOOK-REASON write HANDOFF" in json.dumps(r["body"]["messages"][-2:])'
  check "claude: Stop stdin has session_id, stop_hook_active, last_assistant_message" python3 -c '
import json,sys; s=[json.loads(l) for l in open(sys.argv[1])]
sys.exit(not (s[0]["stop_hook_active"] is False and s[1]["stop_hook_active"] is True and s[0]["last_assistant_message"] == "stopping" and s[0]["session_id"]))' ../stop.jsonl
  check "claude: SessionEnd fires in -p mode with reason" grep -q '"hook_event_name":"SessionEnd","reason":"other"' ../end.jsonl
  end_case

  new_case claude-mcp '{"conversations":[{"match":"W4","turns":[{"tool":"mcp__echosrv__echo","input":{"text":"hi"}}]}]}'
  export ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT
  printf '{"mcpServers":{"echosrv":{"command":"python3","args":["%s","%s"]}}}' "$here/mcp_echo.py" "$D/mcp.log" >.mcp.json
  "$C" -p "W4" $T "mcp__echosrv" >/dev/null
  check "claude: a project .mcp.json server is called with --allowedTools mcp__echosrv" grep -q tools/call "$D/mcp.log"
  end_case

  new_case claude-fail '{"conversations":[{"match":"W5","turns":[{"http_error":500,"always":true}]},{"match":"W6","turns":[{"drop":true,"always":true}]}]}'
  export ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT
  rc=0; CLAUDE_CODE_MAX_RETRIES=0 "$C" -p "W5" >/dev/null 2>&1 || rc=$?
  check "claude: HTTP 500 with CLAUDE_CODE_MAX_RETRIES=0 exits 1 after one request" test $rc = 1 -a "$(nreq)" = 1
  rc=0; CLAUDE_CODE_MAX_RETRIES=0 "$C" -p "W6" >/dev/null 2>&1 || rc=$?
  check "claude: a dropped stream (then a non-streamed retry) exits 1" test $rc = 1
  end_case

  new_case claude-stdin '{"conversations":[{"match":"BIG-PROMPT","turns":[{"text":"read it"}]}]}'
  export ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT
  big_prompt | "$C" -p $T "Bash" >/dev/null
  check "claude: a 200 kB prompt on stdin (claude -p, no prompt argument) arrives whole" req 0 '"BIG-END" in json.dumps(r["body"])'
  end_case
}

verify_codex() {
  local X=$BIN_codex
  codex_home() { # writes $CODEX_HOME/config.toml for the fake provider; extra TOML in $1
    export CODEX_HOME=$D/home/.codex FAKE_KEY=fake; mkdir -p "$CODEX_HOME"
    printf 'model = "gpt-5.5"\nmodel_provider = "fake"\n[model_providers.fake]\nname = "fake"\nbase_url = "http://127.0.0.1:%s/v1"\nenv_key = "FAKE_KEY"\nwire_api = "responses"\nrequest_max_retries = 0\nstream_max_retries = 0\n%s\n' "$PORT" "${1:-}" >"$CODEX_HOME/config.toml"
  }
  local CX=("$X" exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox --disable plugins -c analytics.enabled=false)

  new_case codex-worker '{"conversations":[{"match":"X1","turns":[
    {"tool":"exec_command","input":{"cmd":"echo a > a.txt"}},
    {"tool":"apply_patch","input":"*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n"},{"text":"first done"},
    {"text":"second done"}]}]}'
  codex_home
  "${CX[@]}" --json "X1 go" </dev/null >out1.jsonl 2>/dev/null
  check "codex: exec_command and apply_patch (custom tool, -m gpt-5.5) write files" test -f a.txt -a -f b.txt
  local tid; tid=$(python3 -c 'import json,sys; print(next(json.loads(l)["thread_id"] for l in open(sys.argv[1]) if "thread.started" in l))' out1.jsonl)
  check "codex: --json prints thread.started with thread_id" test -n "$tid"
  "${CX[@]}" --json resume "$tid" "X1 again" </dev/null >/dev/null 2>&1
  check "codex: exec resume ID PROMPT sends the first run's items" req -1 '"X1 go" in json.dumps(r["body"]["input"]) and r["position"] == 3'
  end_case

  new_case codex-hooks '{"conversations":[{"match":"X2","turns":[{"text":"stopping"},{"tool":"exec_command","input":{"cmd":"echo h > HANDOFF"}},{"text":"ok"}]}]}'
  codex_home
  hooks_json "Stop=$root/stop-hook.sh" "SessionEnd=$root/end-hook.sh" >"$CODEX_HOME/hooks.json"
  "${CX[@]}" "X2 go" </dev/null >/dev/null 2>&1
  check "codex: hooks are skipped without --dangerously-bypass-hook-trust" test "$(nreq)" = 1 -a ! -e ../stop.jsonl
  "${CX[@]}" --dangerously-bypass-hook-trust "X2 go" </dev/null >/dev/null 2>&1
  check "codex: a Stop hook's {\"decision\":\"block\"} sends its reason (as <hook_prompt>) and the turn goes on" \
    req 2 '"HOOK-REASON write HANDOFF" in json.dumps(r["body"]["input"])'
  check "codex: HANDOFF written after the block" test -f HANDOFF
  check "codex: SessionEnd fires at the end of exec" grep -q '"hook_event_name":"SessionEnd"' ../end.jsonl
  end_case

  new_case codex-mcp '{"conversations":[{"match":"X3","turns":[{"tool":"mcp__echosrv__echo","input":{"text":"hi"}}]}]}'
  codex_home "$(printf '[mcp_servers.echosrv]\ncommand = "python3"\nargs = ["%s", "%s"]\n' "$here/mcp_echo.py" "$D/mcp.log")"
  "${CX[@]}" "X3 go" </dev/null >/dev/null 2>&1
  check "codex: an [mcp_servers.NAME] tool is called (namespace mcp__NAME)" grep -q tools/call "$D/mcp.log"
  end_case

  new_case codex-fail '{"conversations":[{"match":"X4","turns":[{"http_error":500,"always":true}]},{"match":"X5","turns":[{"drop":true,"always":true}]}]}'
  codex_home
  local rc=0; "${CX[@]}" "X4 go" </dev/null >/dev/null 2>&1 || rc=$?
  check "codex: HTTP 500 with request_max_retries=0, stream_max_retries=0 exits 1 after one request" test $rc = 1 -a "$(nreq)" = 1
  rc=0; "${CX[@]}" "X5 go" </dev/null >/dev/null 2>&1 || rc=$?
  check "codex: a dropped stream exits 1" test $rc = 1
  end_case

  new_case codex-stdin '{"conversations":[{"match":"BIG-PROMPT","turns":[{"text":"read it"}]}]}'
  codex_home
  big_prompt | "${CX[@]}" - >/dev/null 2>&1
  check "codex: a 200 kB prompt on stdin (exec -) arrives whole" req 0 '"BIG-END" in json.dumps(r["body"])'
  end_case
}

verify_aider() {
  local meta=$root/aider-meta.json
  echo '{"openai/fake-model": {"max_tokens": 8192, "max_input_tokens": 128000, "max_output_tokens": 8192, "input_cost_per_token": 0, "output_cost_per_token": 0, "litellm_provider": "openai", "mode": "chat"}}' >"$meta"
  aider_argv() {
    A=("$BIN_aider" --openai-api-base "http://127.0.0.1:$PORT/v1" --openai-api-key fake --model openai/fake-model
      --yes-always --edit-format diff --no-check-update --analytics-disable --no-show-release-notes
      --no-gitignore --model-metadata-file "$meta")
    git init -q . && printf 'greeting = "hello"\n' >hello.py && git add . &&
      git -c user.name=t -c user.email=t@t commit -qm init
  }
  export LITELLM_LOCAL_MODEL_COST_MAP=True GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
  local edit='hello.py\n```python\n<<<<<<< SEARCH\ngreeting = \"hello\"\n=======\ngreeting = \"edited\"\n>>>>>>> REPLACE\n```\n'
  new_case aider-worker '{"conversations":[{"match":"Y1","turns":[{"text":"'"$edit"'"}]}]}'
  aider_argv
  "${A[@]}" --message "Y1 edit" hello.py </dev/null >out.txt 2>&1
  check "aider: a SEARCH/REPLACE answer edits the file and aider commits it" \
    bash -c 'grep -q edited hello.py && test "$(git log --format=%s -1)" = "chore: apply scripted edit"'
  end_case

  new_case aider-file '{"conversations":[{"match":"BIG-PROMPT","turns":[{"text":"read it"}]}]}'
  aider_argv; big_prompt >../prompt.txt
  "${A[@]}" --message-file ../prompt.txt hello.py </dev/null >out.txt 2>&1
  check "aider: a 200 kB prompt by --message-file arrives whole" req 0 '"BIG-END" in json.dumps(r["body"])'
  end_case

  new_case aider-drop '{"conversations":[{"match":"Y2","turns":[{"drop":true,"always":true}]}]}'
  aider_argv
  local rc=0; "${A[@]}" --message "Y2" hello.py </dev/null >out.txt 2>&1 || rc=$?
  check "aider: a dropped stream reads as an empty answer and aider exits 0" test $rc = 0
  end_case
}

for w in "$@"; do "verify_$w"; done
echo "$failures failed"
[[ $failures == 0 ]]
