#!/bin/bash
# Reward 1 when app.py is untouched, prints "ready", and the valid settings are kept.
mkdir -p /logs/verifier
fail() { echo "FAIL: $1"; echo 0 > /logs/verifier/reward.txt; exit 0; }
sha256sum -c /opt/app.py.sha256 || fail "/app/app.py was changed"
[ "$(cd /app && python3 /app/app.py 2>&1)" = "ready" ] || fail "app.py does not print ready"
python3 - <<'PY' || fail "valid settings changed"
import configparser
c = configparser.ConfigParser()
c.read("/app/config.ini")
assert c.get("server", "host") == "127.0.0.1"
assert c.get("database", "name") == "inventory"
assert c.getfloat("database", "timeout_s") == 2.5
PY
echo 1 > /logs/verifier/reward.txt
