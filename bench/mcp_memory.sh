#!/usr/bin/env bash
# `warden mcp` over time: one server on a store of TASKS tasks answers REQUESTS tool
# calls and resource reads (a task, the next leaf, a task's history, STATE.md, and one
# call in 500 the whole list, in one page), then the same again while the CLI changes tasks beside it.
# Prints its RSS, open fds and threads every tenth of the way: they must stay flat.
# Usage: bench/mcp_memory.sh [TASKS] [REQUESTS]   (defaults 10000 20000; needs python3)
set -euo pipefail
cd "$(dirname "$0")/.."
tasks=${1:-10000}
requests=${2:-20000}
target="${CARGO_TARGET_DIR:-target}"
echo "building (release)…" >&2
cargo build -q --release -p warden
warden=$(realpath "$target/release/warden")
dir=$(mktemp -d /tmp/warden-mcp.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
git init -q
"$warden" init >/dev/null
python3 - "$tasks" >plan.json <<'EOF'
import json, sys
n = int(sys.argv[1])
groups = max(n // 100, 1)
tasks = [{"id": f"g{g}", "title": f"group {g}"} for g in range(groups)]
tasks += [{"id": f"t{i}", "title": f"task {i}", "parent": f"g{i % groups}",
           "work": "true"} for i in range(n)]
print(json.dumps({"tasks": tasks}))
EOF
"$warden" plan import plan.json >/dev/null
echo "store: $tasks tasks; $requests requests, then $requests more beside CLI changes" >&2
exec python3 - "$warden" "$tasks" "$requests" <<'EOF'
import json, os, random, subprocess, sys
warden, n, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p = subprocess.Popen([warden, "mcp", "--role", "orchestrator"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
seq = 0
def rpc(method, params=None, notify=False):
    global seq
    msg = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    if not notify:
        seq += 1
        msg["id"] = seq
    p.stdin.write(json.dumps(msg) + "\n")
    p.stdin.flush()
    if notify:
        return None
    while True:
        line = p.stdout.readline()
        if not line:
            sys.exit("warden mcp ended")
        m = json.loads(line)
        if m.get("id") == seq:
            if "error" in m:
                sys.exit(f"{method}: {m['error']}")
            return m["result"]
def tool(name, **args):
    r = rpc("tools/call", {"name": name, "arguments": args})
    if r.get("isError"):
        sys.exit(f"{name}: {r['content'][0]['text']}")
    return r
def sample(pid):
    rss = 0
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"):
            rss = int(l.split()[1])
        if l.startswith("Threads:"):
            threads = int(l.split()[1])
    return rss / 1024, len(os.listdir(f"/proc/{pid}/fd")), threads
rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}})
rpc("notifications/initialized", notify=True)
rng = random.Random(7)
rows = [("start", 0) + sample(p.pid)]
def one(i):
    k = i % 50
    if i % 500 == 0:
        tool("task_list", limit=n)
    elif k % 5 == 1:
        tool("plan_next")
    elif k % 5 == 2:
        tool("history", id=f"t{rng.randrange(n)}")
    elif k % 5 == 3:
        rpc("resources/read", {"uri": "warden://state"})
    else:
        tool("task_get", id=f"t{rng.randrange(n)}")
step = max(total // 10, 1)
for i in range(1, total + 1):
    one(i)
    if i % step == 0:
        rows.append(("reads", i) + sample(p.pid))
# The same beside changes: every tenth request, another process moves a task on.
statuses = ["working", "pending"]
for i in range(1, total + 1):
    one(i)
    if i % 10 == 0:
        t = f"t{(i // 10) % n}"
        to = statuses[(i // 10 // n) % 2]
        subprocess.run([warden, "task", "update", t, "--status", to],
                       stdout=subprocess.DEVNULL, check=True)
    if i % step == 0:
        rows.append(("beside changes", total + i) + sample(p.pid))
p.stdin.close()
p.wait()
print(f"{'phase':<16} {'requests':>9} {'RSS MB':>8} {'fds':>5} {'threads':>8}")
for phase, i, rss, fds, threads in rows:
    print(f"{phase:<16} {i:>9} {rss:>8.2f} {fds:>5} {threads:>8}")
first = [r for r in rows if r[1] >= step][0]
last = rows[-1]
print(f"RSS {first[2]:.2f} → {last[2]:.2f} MB from the first tenth to the end; "
      f"fds {first[3]} → {last[3]}; threads {first[4]} → {last[4]}")
EOF
