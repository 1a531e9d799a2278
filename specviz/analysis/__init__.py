"""What specviz concludes from runs and traces: why a low-precision run left vanilla's tokens
(divergence), whether this machine and model are ready (doctor), whether a shipped trace agrees
with its cost model (landing_check), and a serving engine's /metrics read into specviz's terms
(server_metrics)."""
