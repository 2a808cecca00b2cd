#!/usr/bin/env bash
# Soak (issue 21): one supervisor, `warden run --max-parallel 10`, runs N short tasks of
# agent sessions (default 2,000 tasks), 10 at a time; its resident memory, open file
# descriptors and threads must stay flat from the first hundred tasks to the last.
#
# Usage: bench/soak.sh [N]          e.g. bench/soak.sh 200 for a quick run
#   SOAK_WORK=review  (default) agent tasks in the review workflow, each run by the fake
#                     agent bench/soak_agent.sh (the `custom` preset, process sessions): a
#                     worker session writes soak/<id>.txt, a `## Handoff`, and runs
#                     `warden task complete` (the guard `test -s soak/<id>.txt` runs in the
#                     hand-off); a reviewer session writes `## Review` PASS and runs
#                     `warden task update <id> --status reviewing`; this script plays the
#                     person and runs `warden task approve` (the merge into main); the
#                     supervisor then removes the worktree. N tasks = 2N agent sessions.
#   SOAK_WORK=shell   shell work (`mkdir -p soak && echo ok > soak/<id>.txt`) in the direct
#                     workflow, the same guard: N sessions, no person.
#   SOAK_WORK=direct  agent work in the direct workflow (the agent writes its file and
#                     exits 0; the guard decides): N sessions, no person.
#   SOAK_STALL_S=120  give up when no task moved on (finished or done) for this long.
#   SOAK_KEEP=1       keep the temporary project (its path is printed).
#
# All N tasks are imported at the start, and the run has two parts, so that the supervisor
# can be measured idle twice with the same plan: the tasks after the first hundred (a
# tenth of N when N < 1,000) depend on a task `gate` that fails at once and waits,
# stuck; with the first hundred done and their worktrees removed, the supervisor (with
# nothing to run) is sampled idle, then the script retries the gate with work that
# succeeds, and at the end, all done, the supervisor is sampled idle again. It runs
# without --until-idle (a review task waits for the person, and until-idle would return
# before the last approvals, and at the pause); the script stops it with TERM at the end.
#
# Every ~0.5 s it samples the supervisor's /proc/PID (VmRSS, open fds, Threads, child
# processes) and counts tasks (`warden --json status`): "finished" (all its sessions
# ended: done, or waiting in review for the person) and "done". It prints one row per
# tenth of the tasks finished, then a verdict. Flat means: from the idle sample after the
# first hundred tasks to the idle sample at the end, RSS grew by at most 10 % and fds and
# threads by at most 2; and under load, from the samples taken with 9-10 tasks running
# while the first hundred tasks finished to those while the last hundred did, the highest
# RSS grew by at most 10 % and the median fds and threads by at most 2 (one sample under
# load swings by several fds with what the ten tasks happen to be doing; a window of
# fewer than 5 such samples, as with a small N, is not judged). Exit status: 0 flat, every task done, its file
# merged into main, the person's checkout clean and `warden check` passing; 1 otherwise;
# 2 usage.
set -euo pipefail

usage() { echo "usage: bench/soak.sh [N]   (N >= 20 tasks, default 2000)" >&2; exit 2; }
n="${1:-2000}"
case "$n" in '' | *[!0-9]*) usage ;; esac
[ "$n" -ge 20 ] || usage
work="${SOAK_WORK:-review}"
case "$work" in review | shell | direct) ;; *) echo "SOAK_WORK is review, shell or direct" >&2; exit 2 ;; esac
parallel=10
stall_s="${SOAK_STALL_S:-120}"
first_n=100
[ "$n" -lt 1000 ] && first_n=$((n / 10))
root="$(cd "$(dirname "$0")/.." && pwd)"

echo "building (release)…" >&2
(cd "$root" && cargo build -q --release -p warden)
W="$root/target/release/warden"
agent="$root/bench/soak_agent.sh"
[ -x "$agent" ] || { echo "$agent is not executable" >&2; exit 2; }

dir="$(mktemp -d "${TMPDIR:-/tmp}/warden-soak.XXXXXX")"
sup=""
approver=""
stop_approver() {
  if [ -n "$approver" ]; then
    touch "$dir/.soak-stop"
    wait "$approver" 2> /dev/null || true
    approver=""
  fi
}
cleanup() {
  set +e
  stop_approver
  if [ -n "$sup" ] && kill -0 "$sup" 2> /dev/null; then
    kill -TERM "$sup" 2> /dev/null
    wait "$sup" 2> /dev/null
  fi
  if [ -n "${SOAK_KEEP:-}" ]; then
    echo "kept: $dir" >&2
  else
    rm -rf "$dir"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The project is $dir/repo; the script's own files ($dir) stay out of it, so the person's
# checkout must be clean at the end.
mkdir "$dir/repo"
cd "$dir/repo"
export NO_COLOR=1
git init -q -b main
git config user.name "soak"
git config user.email "soak@localhost.invalid"
echo "# soak" > README.md
git add README.md
git commit -q -m "initial commit"
"$W" init > /dev/null

# The custom preset runs the fake agent with its prompt file.
agent_argv="\"$agent\", \"{prompt_file}\""
[ "$work" = direct ] && agent_argv="$agent_argv, \"direct\""
sed -i "s|^preset = \"claude\".*|preset = \"custom\"\ncommand = [$agent_argv]|" .warden/warden.toml
grep -q '^preset = "custom"' .warden/warden.toml || { echo "could not set the agent preset" >&2; exit 1; }

# The plan: N tasks, each writing soak/<id>.txt, with a guard that checks it; the tasks
# after the first hundred depend on `gate`, shell work that fails once and is then stuck
# (nothing to run: the pause) until the script retries it with work that succeeds.
{
  echo '{"tasks": ['
  echo '  {"id": "gate", "title": "the pause after the first tasks", "work": "false", "max_attempts": 1},'
  for i in $(seq 1 "$n"); do
    id=$(printf 's%05d' "$i")
    case "$work" in
      review) spec="\"agent\": \"Write soak/$id.txt\"" ;;
      direct) spec="\"agent\": \"Write soak/$id.txt\", \"workflow\": \"direct\"" ;;
      shell) spec="\"work\": \"mkdir -p soak && echo ok > soak/$id.txt\"" ;;
    esac
    [ "$i" -gt "$first_n" ] && spec="$spec, \"depends_on\": [\"gate\"]"
    sep=","
    [ "$i" -eq "$n" ] && sep=""
    echo "  {\"id\": \"$id\", $spec, \"postchecks\": \"test -s soak/$id.txt\"}$sep"
  done
  echo ']}'
} > "$dir/plan.json"
"$W" plan import "$dir/plan.json" > /dev/null
status_of() { ("$W" --json task show "$1" 2> /dev/null || true) | sed -n 's/^  "status": "\(.*\)",$/\1/p'; }
gate_done=0 # subtracted from the counts once the gate is done

sessions="$n"
[ "$work" = review ] && sessions=$((2 * n))
echo "soak: $n tasks ($work work, $sessions sessions), warden run --max-parallel $parallel, in $dir" >&2

# The person: approves every task that waits in `reviewing` (review work only).
approve_loop() {
  local ids id
  while [ ! -e "$dir/.soak-stop" ]; do
    ids=$( ("$W" --json task list --status reviewing 2> /dev/null || true) | sed -n 's/^    "id": "\(.*\)",$/\1/p')
    for id in $ids; do
      "$W" task approve "$id" > /dev/null 2>> "$dir/approve.err" || echo "approve $id failed" >> "$dir/approve.err"
    done
    [ -n "$ids" ] || sleep 0.3
  done
}

samples="$dir/samples.txt" # elapsed_s finished rss_kb fds threads children active idle done anon_kb
: > "$samples"
sample() { # $1 = finished, $2 = active, $3 = 1 when idle, $4 = done; appends one line
  local rss anon thr fds kids now
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$sup/status" 2> /dev/null || true)
  anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$sup/status" 2> /dev/null || true)
  thr=$(awk '/^Threads:/ {print $2}' "/proc/$sup/status" 2> /dev/null || true)
  fds=$( (ls "/proc/$sup/fd" 2> /dev/null || true) | wc -l)
  kids=$( (ps -o pid= --ppid "$sup" 2> /dev/null || true) | wc -l)
  now=$EPOCHREALTIME
  printf '%s %s %s %s %s %s %s %s %s %s\n' "$(awk -v a="$t0" -v b="$now" 'BEGIN {printf "%.1f", b - a}')" \
    "$1" "${rss:-0}" "$fds" "${thr:-0}" "$kids" "$2" "$3" "$4" "${anon:-0}" >> "$samples"
}
# "finished done active" from `warden --json status`: tasks whose sessions have all
# finished (its "complete": tasks that pass, done or waiting in review for the person),
# tasks done (approved and merged), and tasks in working or agent-review (what runs).
counts() {
  ("$W" --json status 2> /dev/null || true) | awk '
    /^    "complete": / { gsub(/[^0-9]/, ""); c = $0 }
    name != "" { gsub(/[^0-9]/, ""); if (name == "done") d += $0; else a += $0; name = "" }
    /^        "(done|working|agent-review)",$/ { name = $1; gsub(/[",]/, "", name) }
    END { print c + 0, d + 0, a + 0 }' | awk -v g="$gate_done" '{ print $1 - g, $2 - g, $3 }'
}
snapshot() { # what the supervisor holds open, and its threads: $1 = a name
  (ls -l "/proc/$sup/fd" 2> /dev/null || true) | awk 'NR > 1 {print $NF}' | sed 's/:\[[0-9]*\]$//' |
    sort | uniq -c | sort -rn > "$dir/fds_$1.txt"
  (cat "/proc/$sup/task/"*/comm 2> /dev/null || true) | sort | uniq -c | sort -rn > "$dir/threads_$1.txt"
}

ok=1
# Samples until TARGET tasks are done and their worktrees removed, then takes an idle
# sample and a snapshot named $2. Fails on a dead supervisor or a stall.
run_until() {
  local target=$1 name=$2 c d active last="" last_change=$EPOCHREALTIME
  while :; do
    if ! kill -0 "$sup" 2> /dev/null; then
      echo "FAIL: the supervisor exited early; the end of its log:" >&2
      tail -n 20 "$dir/run.log" >&2
      ok=0
      return 1
    fi
    read -r c d active <<< "$(counts)"
    if [ "$d" -ge "$target" ]; then
      # Every task done: wait (up to 60 s) for the supervisor to remove the worktrees
      # (but the gate's, which stays while it is stuck) and for the gate to be stuck.
      for _ in $(seq 1 120); do
        if [ -z "$(ls -A .warden/worktrees 2> /dev/null | grep -vx gate)" ] &&
          { [ "$gate_done" = 1 ] || [ "$(status_of gate)" = stuck ]; }; then
          break
        fi
        sleep 0.5
      done
      sleep 1
      sample "$c" 0 1 "$d"
      snapshot "$name"
      return 0
    fi
    sample "$c" "$active" 0 "$d"
    if [ "$c $d" != "$last" ]; then
      last="$c $d"
      last_change=$EPOCHREALTIME
    elif awk -v a="$last_change" -v b="$EPOCHREALTIME" -v s="$stall_s" 'BEGIN {exit !(b - a > s)}'; then
      echo "FAIL: nothing moved for ${stall_s} s ($c of $n tasks finished, $d done); \`warden status\`:" >&2
      "$W" status >&2 || true
      ok=0
      snapshot "$name"
      return 1
    fi
    sleep 0.5
  done
}

"$W" run --max-parallel "$parallel" > "$dir/run.log" 2>&1 &
sup=$!
t0=$EPOCHREALTIME
if [ "$work" = review ]; then
  approve_loop &
  approver=$!
fi
if run_until "$first_n" first; then
  "$W" task retry gate --work true > /dev/null
  for _ in $(seq 1 120); do
    [ "$(status_of gate)" = done ] && break
    sleep 0.25
  done
  [ "$(status_of gate)" = done ] && gate_done=1
  run_until "$n" end || true
fi

# Stop the person, then the supervisor.
stop_approver
sup_rc="-"
if kill -0 "$sup" 2> /dev/null; then
  kill -TERM "$sup"
  sup_rc=0
  wait "$sup" || sup_rc=$?
fi
sup=""

# The table: one row per tenth of the tasks, over the samples taken while that tenth
# finished its sessions: the last one's counts and time, the highest RSS, fds, threads
# and children sampled, and the most tasks seen in working or agent-review at once.
# "finished" counts tasks whose sessions have all ended; "done", those also approved.
echo
echo "soak: $n tasks, $work work ($sessions sessions), warden run --max-parallel $parallel"
printf '%9s  %5s  %7s  %8s  %5s  %7s  %8s  %6s  %9s\n' finished done "RSS MB" "anon MB" fds threads children active elapsed_s
awk -v n="$n" '
  { k = ($2 == 0) ? 1 : int(($2 * 10 + n - 1) / n); if (k > 10) k = 10
    seen[k] = 1; fin[k] = $2; at[k] = $1; dn[k] = $9
    if ($3 > rss[k]) rss[k] = $3; if ($10 > anon[k]) anon[k] = $10; if ($4 > fds[k]) fds[k] = $4; if ($5 > thr[k]) thr[k] = $5
    if ($6 > kid[k]) kid[k] = $6; if ($7 > act[k]) act[k] = $7 }
  END { for (k = 1; k <= 10; k++) if (k in seen)
    printf "%9d  %5d  %7.1f  %8.1f  %5d  %7d  %8d  %6d  %9.1f\n", fin[k], dn[k], rss[k] / 1024, anon[k] / 1024, fds[k], thr[k], kid[k], act[k], at[k] }
' "$samples"

# Under load: the samples with 9 or 10 tasks running (working or agent-review) while the
# first hundred tasks finished their sessions, and while the last hundred did. "max_rss median_fds median_threads samples".
window() {
  local lo=$1 hi=$2 sel
  sel=$(awk -v lo="$lo" -v hi="$hi" -v p="$parallel" '$8 == 0 && $7 >= p - 1 && $2 >= lo && $2 < hi' "$samples")
  [ -n "$sel" ] || { echo "0 0 0 0"; return; }
  med() { echo "$sel" | awk -v c="$1" '{ print $c }' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  echo "$(echo "$sel" | awk 'BEGIN { m = 0 } $3 > m { m = $3 } END { print m }') $(med 4) $(med 5) $(echo "$sel" | wc -l)"
}
idle() { awk -v at="$1" '$8 == 1 && $9 >= at { print $3, $4, $5, 1, $10; exit }' "$samples"; }
flat=1
verdict=""
compare() { # $1 label, $2 reference "rss fds threads samples", $3 later one, $4 fewest samples
  local r
  r=$(awk -v a="$2" -v b="$3" -v m="$4" 'BEGIN { split(a, x, " "); split(b, y, " ");
    if (x[4] + 0 < m || y[4] + 0 < m) {
      print (m == 1 ? "GREW? (no sample)" : "not judged (fewer than " m " samples)"); exit }
    bad = (y[1] > x[1] * 1.10) || (y[2] > x[2] + 2) || (y[3] > x[3] + 2);
    printf "%s  RSS %.1f → %.1f MB (%+.1f %%), fds %d → %d, threads %d → %d", (bad ? "GREW" : "flat"),
      x[1] / 1024, y[1] / 1024, (y[1] - x[1]) * 100 / x[1], x[2], y[2], x[3], y[3]
    if (x[5] != "") printf " (anonymous memory %.1f → %.1f MB)", x[5] / 1024, y[5] / 1024 }')
  verdict="$verdict
  $1: $r"
  case "$r" in GREW*) flat=0 ;; esac
}
idle_first=$(idle "$first_n")
idle_end=$(idle "$n")
load_first=$(window 0 "$first_n")
load_last=$(window $((n - first_n)) "$n")
peak=$(awk 'BEGIN { m = 0 } $3 > m { m = $3 } END { printf "%.1f", m / 1024 }' "$samples")
echo "samples: $(wc -l < "$samples") (every ~0.5 s); peak RSS $peak MB"
compare "idle, after the first $first_n tasks → after all $n" "${idle_first:-0 0 0 0}" "${idle_end:-0 0 0 0}" 1
compare "under load, first $first_n → last $first_n tasks ($(echo "$load_first" | cut -d' ' -f4) and $(echo "$load_last" | cut -d' ' -f4) samples with $((parallel - 1))-$parallel running; highest RSS, median fds and threads)" "$load_first" "$load_last" 5

# Every task must have ended done, the log must replay, nothing may be left behind.
statuses=$("$W" --json task list | sed -n 's/^    "status": "\(.*\)",$/\1/p' | sort | uniq -c | awk '{ printf "%s%s %s", sep, $1, $2; sep = ", " }')
done_n=$("$W" --json task list | grep -c '^    "status": "done",$' || true)
check=$("$W" check 2>&1) || { ok=0; check="FAILED: $check"; }
worktrees=$(($(git worktree list | wc -l) - 1))
merged=$( (git ls-tree --name-only main soak/ 2> /dev/null || true) | wc -l)
echo "tasks (and the gate): $statuses; warden check: $check"
dirty=$(git status --porcelain | wc -l)
echo "git: $merged of $n tasks' files merged into main, $worktrees worktree(s) left, $dirty change(s) in the person's checkout; supervisor exit after TERM: $sup_rc"
if [ -s "$dir/approve.err" ]; then
  echo "approve errors (first 5):"
  head -n 5 "$dir/approve.err"
fi
[ "$done_n" -eq $((n + 1)) ] || { ok=0; echo "FAIL: $done_n of $((n + 1)) tasks (the gate included) done"; }
[ "$merged" -eq "$n" ] || { ok=0; echo "FAIL: $merged of $n tasks' files are on main"; }
[ "$worktrees" -eq 0 ] || echo "note: $worktrees worktree(s) not removed"
if [ "$dirty" -ne 0 ]; then
  ok=0
  echo "FAIL: the person's checkout ($dir/repo) is not clean after the merges (first 5 of git status):"
  git status --porcelain | head -n 5
fi

if [ "$flat" = 1 ]; then
  echo "verdict: FLAT$verdict"
else
  echo "verdict: NOT FLAT$verdict"
  for f in first end; do
    [ -s "$dir/fds_$f.txt" ] || continue
    echo "open fds, idle after the $f part (count target):"
    sed 's/^/    /' "$dir/fds_$f.txt" | head -n 15
    echo "threads, idle after the $f part (count name):"
    sed 's/^/    /' "$dir/threads_$f.txt" | head -n 10
  done
fi
[ "$flat" = 1 ] && [ "$ok" = 1 ]
