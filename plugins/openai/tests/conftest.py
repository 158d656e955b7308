"""The openai plugin's tests run against its scripted server (`ore_mock_openai`)."""

pytest_plugins = ["ore_openai.testing"]
