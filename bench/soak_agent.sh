#!/bin/sh
# The fake agent of bench/soak.sh: a few milliseconds of what a real coding agent does
# at the end of its session, through the same interfaces (the environment Warden gives
# the session, TASK.md, the `warden` binary Warden puts first on the session's PATH).
# Configured as `[agent] preset = "custom"`, `command = [this, "{prompt_file}"]`.
#
#   worker:   reads its prompt, writes soak/<id>.txt in its worktree (its cwd), appends a
#             `## Handoff` to TASK.md and runs `warden task complete`
#   reviewer: checks the worker's file, appends `## Review` with PASS and runs
#             `warden task update <id> --status reviewing`
#   with a second argument `direct` (a `workflow: direct` task, SOAK_WORK=direct): the
#             worker writes the file and exits 0; the guard decides
set -eu
prompt_file=$1
kind=${2:-review}
id=$WARDEN_TASK_ID
task_file=$WARDEN_TASK_FILE
test -s "$prompt_file" || { echo "soak agent: empty prompt $prompt_file" >&2; exit 3; }

if grep -q "^## Handoff" "$task_file" 2>/dev/null; then handed_off=1; else handed_off=0; fi

case "$WARDEN_ROLE" in
worker)
  mkdir -p soak
  printf 'work of %s\n' "$id" > "soak/$id.txt"
  if [ "$kind" = direct ]; then
    exit 0
  fi
  [ "$handed_off" = 1 ] || printf '\n## Handoff\nDONE: wrote soak/%s.txt\nUNCERTAIN: nothing\n' "$id" >> "$task_file"
  exec warden task complete "$id" >/dev/null
  ;;
reviewer)
  test -s "soak/$id.txt" || { echo "soak agent: soak/$id.txt is missing" >&2; exit 4; }
  printf '\n## Review\nPASS: soak/%s.txt is there\n' "$id" >> "$task_file"
  exec warden task update "$id" --status reviewing >/dev/null
  ;;
*)
  echo "soak agent: unknown role $WARDEN_ROLE" >&2
  exit 2
  ;;
esac
