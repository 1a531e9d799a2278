"""What specviz concludes from runs and traces: why a low-precision run left vanilla's tokens
(divergence), whether this machine and model are ready (doctor), whether a shipped trace agrees
with its cost model (landing_check), a serving engine's /metrics read into specviz's terms
(server_metrics), and speculation under load: the speedup by batch size predicted (planner), a
server's per-request statistics as its acceptance (server_stats), the answer as vLLM's and
SGLang's settings (server_settings)."""
