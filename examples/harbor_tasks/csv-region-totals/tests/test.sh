#!/bin/bash
# Partial credit: reward.json with format_ok, values_ok and their mean as reward.
mkdir -p /logs/verifier
python3 /tests/check_totals.py
