#!/bin/bash
# Partial credit: reward.json with one key per requested edit and their mean as reward.
mkdir -p /logs/verifier
python3 /tests/check_package.py
