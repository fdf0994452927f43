#!/bin/bash
# Reward 1 when /app/error_counts.txt holds the expected counts, in order.
mkdir -p /logs/verifier
expected=$'3 db\n2 api\n1 cache\n1 worker'
actual="$(sed 's/[[:space:]]*$//' /app/error_counts.txt 2>/dev/null)"
if [ "$actual" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  printf 'expected:\n%s\ngot:\n%s\n' "$expected" "$actual"
  echo 0 > /logs/verifier/reward.txt
fi
