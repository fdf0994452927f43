#!/bin/bash
# Reward 1 when /app/held.txt says both were held and the agent's log under /logs/agent starts as asked.
mkdir -p /logs/verifier
if [ "$(cat /app/held.txt 2>/dev/null)" = "1100 1024" ] \
    && [ "$(head -n 1 /logs/agent/progress.log 2>/dev/null)" = "opening 1100 files" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "held.txt: $(cat /app/held.txt 2>&1); progress.log: $(head -n 1 /logs/agent/progress.log 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
