"""The openai plugin's tests run against its scripted server (`ore_mock_openai`)."""

from ore_openai.testing import ore_mock_openai

__all__ = ["ore_mock_openai"]
