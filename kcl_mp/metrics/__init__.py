"""The metrics catalogue (pure) and the metrics process: CloudWatch, Prometheus and /healthz."""
