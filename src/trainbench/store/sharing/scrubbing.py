"""What may leave this machine in an export file (docs/privacy.md): no user name, host name or absolute path."""

from __future__ import annotations

import contextlib
import re
import socket

from trainbench.store import tracking

# An absolute path: a POSIX path starting at `/` where no word, `.`, `~`, `/` or `<` comes before it (so not the
# path of a URL, `http://host:5000/api/...`, nor `./a/b`, `~/a`, `1/2`, `samples/s`, an HTML closing tag `</p>`),
# including the path of a `file://` or `sqlite:////` URI; or a Windows path `C:\...`. It ends at whitespace, a
# quote or `, ; : | < > ( ) [ ] { }`. The operating system's own folders (/sys, /proc, /dev, /etc, /usr) name no
# one and are kept.
_ABSOLUTE_PATH = re.compile(
    r"(?:(?<=file://)|(?<=:///)|(?<![\w.~/\\<-]))"
    r"(?:/(?!(?:sys|proc|dev|etc|usr)(?:/|\b))(?=[\w.~@+-])|[A-Za-z]:\\)"
    r"[^\s\"'`,;:|<>()\[\]{}]*"
)
# Names too common to replace as a host or user name (they would also hit ordinary words).
_GENERIC_NAMES = frozenset({"localhost", "root", "user", "admin", "ubuntu", "debian", "linux", "runner", "none"})


def scrub(text: str) -> str:
    """`text` as it may leave this machine: tracking.private (project path -> `./`, home -> `~`, credentials
    masked); then every absolute path left (see _ABSOLUTE_PATH) -> `<path>`; then this machine's host name
    (and its short form) -> `<host>` and login name -> `<user>`, each only as a whole token, case-sensitive, and
    only when longer than 3 characters and not a generic name like `localhost` or `root`."""
    text = _ABSOLUTE_PATH.sub("<path>", tracking.private(text))
    for name, placeholder in _own_names():
        text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", placeholder, text)
    return text


def _own_names() -> list[tuple[str, str]]:
    import getpass

    names: list[tuple[str, str]] = []
    host = socket.gethostname()
    for candidate in (host, host.split(".", 1)[0]):
        names.append((candidate, "<host>"))
    with contextlib.suppress(KeyError, OSError):  # no login name (a container's uid without a passwd entry)
        names.append((getpass.getuser(), "<user>"))
    return [(n, p) for n, p in names if len(n) > 3 and n.lower() not in _GENERIC_NAMES]


def scrubbed_line(error: BaseException) -> str:
    """The first line of what went wrong, with no credential or absolute path of this machine."""
    text = str(error).strip()
    return scrub(text.splitlines()[0][:300] if text else type(error).__name__)
