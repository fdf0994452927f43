#!/bin/bash
# Reward 1 when /app/unique_emails.txt is exactly the expected list.
mkdir -p /logs/verifier
expected=$'alice@example.com\nbob@example.com\ncarol@example.org\ndave@example.net\neve@example.com'
if [ -f /app/unique_emails.txt ] && [ "$(cat /app/unique_emails.txt)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
