"""The exception types the command line prints as one line, with no traceback."""


class UserError(Exception):
    """A mistake in what the user asked for (bad name, missing file, invalid value)."""


class ServiceError(RuntimeError):
    """A model server that failed after every retry (`harness.backends.remote.RemoteError`):
    not a bug of the harness, so the command line prints one line saying what failed."""
