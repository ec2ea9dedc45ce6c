"""The base every wire model derives from: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


def _as_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted to it."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]
"""A timestamp that is always UTC, so it goes on the wire as RFC 3339 ending in ``Z``."""


class WireModel(BaseModel):
    """A model that crosses the wire.

    Fields are snake_case in Python and camelCase on the wire; both spellings are accepted on input.
    Unknown input fields are ignored, so an older server keeps working with a newer client.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        defer_build=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict: camelCase keys, unset optionals omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Params(WireModel):
    """Base of every request's params."""
