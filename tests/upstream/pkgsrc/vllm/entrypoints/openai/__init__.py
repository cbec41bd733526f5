"""The OpenAI-compatible server (fake)."""
