"""`beam-probe serve`: Prometheus metrics of nodes that run no exporter.

The allow-list and its file (config.py), one kept connection per target
with its scrapes (targets.py), figures as metric families (families.py)
and the HTTP face (server.py). prometheus_client is imported here and
nowhere else: only `serve` pays for it."""
