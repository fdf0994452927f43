"""The server's core, under every protocol surface: the one session pool, who may use it, its counters and logs.

Nothing here knows a surface or a transport: `sessions` drives environments, `served_env` is what every surface
needs of them (the factory, tools, actions and reset arguments checked, detached sessions, refusals),
`http_exchange` is one HTTP call as an HTTP surface reads and answers it, `access` decides who may open a
session, `metrics` counts, `quiet_log` keeps an attack from flooding the log, `memory` gives memory back after a
burst, and `eager` runs a coroutine in the caller's callback until it first waits.
"""
