"""Operating the function: settings, config report, logs, metrics, tracing."""
