#!/bin/bash
# Reward 1 when /app/largest.txt names the three largest files, largest first.
mkdir -p /logs/verifier
expected=$'logs/old/app.1.log\nimg/banner.png\nlogs/app.log'
actual="$(sed 's#^\./##; s/[[:space:]]*$//' /app/largest.txt 2>/dev/null)"
if [ "$actual" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  printf 'got:\n%s\n' "$actual"
  echo 0 > /logs/verifier/reward.txt
fi
