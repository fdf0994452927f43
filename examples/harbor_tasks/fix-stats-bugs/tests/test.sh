#!/bin/bash
# Reward 1 when every unittest case in /tests/test_stats.py passes.
mkdir -p /logs/verifier
if python3 /tests/test_stats.py -v; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
