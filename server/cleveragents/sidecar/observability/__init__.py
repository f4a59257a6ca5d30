"""What the sidecar tells its operators: structured logs (``logs``), OpenTelemetry traces
(``tracing``) and Prometheus metrics (``metrics``). The last two are imported only when on."""
