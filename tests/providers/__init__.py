"""Tests of the OpenAI and Anthropic adapters against fake providers on loopback."""
