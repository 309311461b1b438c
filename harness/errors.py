"""The one exception type for user errors: the CLI prints its message as a single line, no traceback."""


class UserError(Exception):
    """A mistake in what the user asked for (bad name, missing file, invalid value)."""
