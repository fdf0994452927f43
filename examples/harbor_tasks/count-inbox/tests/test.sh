#!/bin/bash
# Reward 1 when count.txt holds $EXPECTED_COUNT (from task.toml's [verifier.env]). The paths are relative on purpose:
# as in harbor, the verifier runs in the image's working directory (/app), not in /tests.
mkdir -p /logs/verifier
if [ -n "$EXPECTED_COUNT" ] && [ "$(cat count.txt 2>/dev/null)" = "$EXPECTED_COUNT" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "cwd $(pwd), EXPECTED_COUNT '$EXPECTED_COUNT', count.txt: $(cat count.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
