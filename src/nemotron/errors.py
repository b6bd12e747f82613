"""The one exception type users see.

Every error we raise on bad input is a `NemotronError` whose message is one line that says what was
wrong, where (file, field, line), and how to fix it. The CLI entry point (`nemotron.cli.run`) prints
it as `error: <message>` on stderr and exits with status 2, so a user never has to read a traceback
to learn that they passed the wrong path.
"""


class NemotronError(Exception):
    """A user-facing error: one line naming what was wrong, where, and the fix."""
