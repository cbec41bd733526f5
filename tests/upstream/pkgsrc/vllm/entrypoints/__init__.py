"""vLLM's entry points (fake): only the OpenAI-compatible API server's module."""
