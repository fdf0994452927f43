#!/bin/bash
set -euo pipefail
tr 'A-Z' 'a-z' < /app/emails.txt | sed 's/^[[:space:]]*//; s/[[:space:]]*$//' | grep -v '^$' | sort -u > /app/unique_emails.txt
