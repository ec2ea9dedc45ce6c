"""The samples the faces' tests are fed cover the whole ``ProgressEvent`` union."""

from __future__ import annotations

from tests.events import every_progress, every_progress_event, progress_event_kinds
from tether.protocol.kernel import ProgressParams, ToolCallStatus, ToolCallUpdate


def test_the_samples_hold_every_kind_of_event_and_every_tool_call_status() -> None:
    events = every_progress_event()
    assert {type(event) for event in events} == set(progress_event_kinds())
    assert len(progress_event_kinds()) >= 12  # the union was read, not an empty tuple
    statuses = {event.status for event in events if isinstance(event, ToolCallUpdate)}
    assert statuses == set(ToolCallStatus)


def test_every_sample_comes_back_as_itself_from_the_wire() -> None:
    for progress in every_progress():
        assert ProgressParams.model_validate(progress.to_wire()) == progress
