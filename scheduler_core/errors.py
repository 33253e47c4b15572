"""Errors that turn a request into a ``rejected`` result."""

from __future__ import annotations


class RequestError(ValueError):
    """The request is invalid; it can never be placed as it is.

    Attributes:
        field: dotted path of the offending input (``model.backend_parameters``).
        code: stable machine code (``invalid_request``, ``invalid_backend_parameters``, ...).
        message: one-line human text (GPUStack's wording where GPUStack has one).
        context: GPUStack's prefix for its state message (``Failed to find candidate``).
    """

    def __init__(
        self,
        field: str | None,
        message: str,
        code: str = "invalid_request",
        context: str | None = None,
    ) -> None:
        super().__init__(message)
        self.field = field
        self.code = code
        self.message = message
        self.context = context
