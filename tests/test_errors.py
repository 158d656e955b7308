"""`describe_validation_error`: the one way ore words a pydantic ValidationError."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ore_core import describe_validation_error


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    port: int = 0
    password: str = ""

    @field_validator("port")
    @classmethod
    def _positive(cls, port: int) -> int:
        if port < 0:
            raise ValueError("must not be negative")
        return port


def error_of(value: object) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        Settings.model_validate(value)
    return raised.value


def test_each_problem_names_its_key_and_what_is_allowed() -> None:
    assert describe_validation_error(error_of({"port": -1})) == "port: must not be negative"


def test_problems_are_joined_on_one_line() -> None:
    text = describe_validation_error(error_of({"port": "x", "password": 3}))
    assert text.count("; ") == 1
    assert text.startswith("port: ")


def test_show_input_and_prefix_and_origin_decorate_the_key() -> None:
    text = describe_validation_error(
        error_of({"port": -1}), key_prefix="web.", show_input=True, origin=lambda _: "from a.toml"
    )
    assert text == "web.port = -1 (from a.toml): must not be negative"


def test_secrets_are_masked() -> None:
    text = describe_validation_error(
        error_of({"password": 3}), show_input=True, secret=lambda path, _: path == ("password",)
    )
    assert text.startswith("password = ********: ")


def test_an_unknown_key_lists_the_known_ones_when_given() -> None:
    text = describe_validation_error(error_of({"prot": 1}), known_keys=Settings.model_fields)
    assert text == "unknown key prot (known keys: port, password)"


def test_without_known_keys_an_unknown_key_reads_as_pydantic_says() -> None:
    assert describe_validation_error(error_of({"prot": 1})) == (
        "prot: Extra inputs are not permitted"
    )


def test_an_error_of_the_whole_value_is_named_by_whole() -> None:
    assert describe_validation_error(error_of([1]), whole="(body)").startswith("(body): ")
