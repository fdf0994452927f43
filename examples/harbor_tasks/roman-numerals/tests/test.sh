#!/bin/bash
# Reward 1 when /tests/check_roman.py's asserts all hold.
mkdir -p /logs/verifier
if python3 /tests/check_roman.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
