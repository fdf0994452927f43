"""OpenEnv 0.10.0's MCPToolClient against a one-slot server with a short idle timeout; run with the OpenEnv venv.

    python openenv_capacity.py URL IDLE_S   → JSON lines: the second client's refusal, then the first client's
                                              call after its session was reaped.
"""

import json
import sys
import time

from openenv.core.mcp_client import MCPToolClient

url, idle_s = sys.argv[1], float(sys.argv[2])
first = MCPToolClient(base_url=url).sync()
first.connect()
print(json.dumps({"first": first.call_tool("echo_message", message="mine")}))
second = MCPToolClient(base_url=url).sync()
try:
    second.connect()
    print(json.dumps({"second": "connected"}))
except Exception as error:
    print(json.dumps({"second_refused": str(error)}))
time.sleep(idle_s * 3)
try:
    first.call_tool("echo_message", message="still mine?")
    print(json.dumps({"after_reap": "answered"}))
except Exception as error:
    print(json.dumps({"after_reap": str(error)}))
