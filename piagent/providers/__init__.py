"""Streaming provider clients (stream_simple, the registry and the model catalogue)."""
