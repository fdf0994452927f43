#!/bin/bash
# Reward 1 when /app/run.sh runs as a program from another directory and prints the expected line.
mkdir -p /logs/verifier
out="$(cd / && /app/run.sh 2>&1)"
status=$?
if [ $status -eq 0 ] && [ "$out" = "hello from run.sh: 3 names" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "status $status, output: $out"
  echo 0 > /logs/verifier/reward.txt
fi
