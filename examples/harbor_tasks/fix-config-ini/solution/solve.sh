#!/bin/bash
set -euo pipefail
cat > /app/config.ini <<'INI'
[server]
host = 127.0.0.1
port = 8080
workers = 4

[database]
name = inventory
timeout_s = 2.5
INI
