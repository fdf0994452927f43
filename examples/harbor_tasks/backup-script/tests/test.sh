#!/bin/bash
# Reward 1 when /app/backup.sh archives a fresh directory correctly and refuses bad arguments.
mkdir -p /logs/verifier
fail() { echo "FAIL: $1"; echo 0 > /logs/verifier/reward.txt; exit 0; }
[ -x /app/backup.sh ] || fail "/app/backup.sh is missing or not executable"
work="$(mktemp -d)"
mkdir -p "$work/notes/sub"
echo "buy milk" > "$work/notes/todo.txt"
echo "deep" > "$work/notes/sub/deep.txt"
out="$(/app/backup.sh "$work/notes")" || fail "exit status $? on a good directory"
[ "$out" = "/app/backups/notes.tar.gz" ] || fail "printed '$out'"
listing="$(tar -tzf /app/backups/notes.tar.gz | sed 's#/$##' | sort | tr '\n' ' ')"
[ "$listing" = "notes notes/sub notes/sub/deep.txt notes/todo.txt " ] || fail "archive holds: $listing"
[ "$(tar -xzOf /app/backups/notes.tar.gz notes/todo.txt)" = "buy milk" ] || fail "todo.txt content"
before="$(ls /app/backups | sort | tr '\n' ' ')"
/app/backup.sh "$work/missing" 2>/dev/null && fail "exit 0 on a missing directory"
/app/backup.sh 2>/dev/null && fail "exit 0 with no argument"
[ "$(ls /app/backups | sort | tr '\n' ' ')" = "$before" ] || fail "bad arguments wrote files"
echo 1 > /logs/verifier/reward.txt
