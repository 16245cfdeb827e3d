"""Network builders used by the chapters."""
