"""The two ways a command ends badly. Both carry a message that says what to do next."""


class StackError(Exception):
    """Base: a failure the user can act on; its message is printed as one line."""

    exit_code = 1


class BadInput(StackError):
    """Bad usage or input (a dirty checkout, a missing commit, an invalid stack): exit 2,
    raised before anything was changed."""

    exit_code = 2


class WorkFailed(StackError):
    """The work was attempted and failed (a conflict, lint findings): exit 1."""

    exit_code = 1
