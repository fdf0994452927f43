#!/bin/bash
# Partial credit keys in reward.json: valid_json, counts_ok; reward 1 only when both hold.
mkdir -p /logs/verifier
python3 /tests/check_words.py
