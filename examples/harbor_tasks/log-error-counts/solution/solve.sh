#!/bin/bash
set -euo pipefail
awk '$2 == "ERROR" { sub(":", "", $3); n[$3]++ } END { for (s in n) print n[s], s }' /app/server.log \
  | sort -k1,1nr -k2,2 > /app/error_counts.txt
