"""Reads /app/config.ini and says whether the service could start."""

import configparser
import sys

config = configparser.ConfigParser()
config.read("/app/config.ini")
try:
    port = config.getint("server", "port")
    host = config.get("server", "host")
    workers = config.getint("server", "workers")
    database = config.get("database", "name")
    timeout = config.getfloat("database", "timeout_s")
except (configparser.Error, ValueError) as error:
    sys.exit(f"bad config: {error}")
if not 1024 <= port <= 65535:
    sys.exit(f"bad config: port {port} must be within 1024..65535")
if workers < 1:
    sys.exit("bad config: workers must be at least 1")
print("ready")
