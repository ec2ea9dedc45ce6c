"""The errors of the providers.

Hierarchy::

    ProviderError (tether.protocol)   -32012  the endpoint failed for good; ``data`` is
    │                                         ``{status?, provider, body?}``, never a key
    └── ScriptExhausted                       the scripted provider was asked for a turn it lacks
    ScriptNotUsedUp (AssertionError)          a test left scripted turns unused
    AttemptFailed                             one try failed (internal): the retry loop decides
                                              whether to try again, then raises ProviderError

Only :class:`ProviderError` (or its subclass) leaves a provider's ``stream``.
"""

from __future__ import annotations

from tether.protocol import ProviderError


class ScriptExhausted(ProviderError):
    """The scripted provider has no turn left for a request."""

    def __init__(self, used: int) -> None:
        super().__init__(
            f"scripted provider: the script has no turn left (all {used} used)",
            {"provider": "scripted"},
        )


class ScriptNotUsedUp(AssertionError):
    """Scripted turns were left unused: the code under test called the model fewer times."""


class AttemptFailed(Exception):
    """One try at a model request failed.

    ``retryable`` says whether trying again may help (429, 5xx, a connection that failed or was cut
    before the turn began, a timeout); ``retry_after`` is the server's requested wait in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        body: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status = status
        self.body = body
        self.retry_after = retry_after
