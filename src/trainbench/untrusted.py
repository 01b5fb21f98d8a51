"""Text from outside (an imported file, a store, a config value) made safe to record, share and show.

Two rule sets, each the only one of its kind in trainbench:

- `redact`: secrets masked as `***`, wherever text is recorded (trainbench.store.tracking.writes), exported or imported
  (trainbench.store.sharing) and shown (every screen, through `shown`). It masks the user:password of any URI
  (`http://alice:***@host`, `postgresql://bob:***@host/db`); passwords, tokens, secrets and keys in a query
  string (`?token=***&password=***`); assignments to a name ending in `_PASSWORD`, `_TOKEN`, `_SECRET` or `_KEY`
  (`MLFLOW_TRACKING_PASSWORD=***`, `aws_secret_access_key=***`); and cloud access key ids (AWS `AKIA...` /
  `ASIA...`). What only looks like one is left alone: a URI without a password, `KEYBOARD=us`, `tokens=512`,
  `MONKEY=1`, a 20-letter word in capitals that is not an access key.
- `for_terminal`: control characters replaced by their visible `\\xNN` / `\\uNNNN` spelling, so a value
  printed to a terminal cannot clear the screen, set the window title, move the cursor or reorder text (C0 and
  C1 controls, DEL, bidirectional overrides).

Light on purpose: the sweep process and every entry point import it.
"""

from __future__ import annotations

import re

MASK = "***"

# Hydra escapes `:` in the overrides it hands to jobs (http\://user\:secret@host): match that spelling too.
_URI_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*\\?://)(?P<user>[^:@/\s\\]+)(?P<colon>\\?:)[^@/\s]+@")
_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:password|passwd|pwd|token|access_token|auth_token|secret|client_secret|api_key|apikey|"
    r"access_key|secret_key|key|sig|signature)=)[^&#\s]+"
)
# NAME=value where NAME ends in _PASSWORD, _TOKEN, _SECRET or _KEY (any case, `.` or `-` for `_` too), or is
# password, token or secret alone; the value runs to whitespace, a quote, `,` `;` or `&`.
_ASSIGNED_SECRET = re.compile(
    r"(?i)(?<![\w.-])((?:(?:[a-z0-9]+[_.-])*(?:password|passwd|token|secret)|(?:[a-z0-9]+[_.-])+key)\s*=\s*)"
    r"(?!\*\*\*)[^\s\"',;&]+"
)
# AWS access key ids: AKIA (long-term) or ASIA (temporary) and 16 capitals or digits, as a whole word.
_CLOUD_KEY_ID = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")

# C0 controls, DEL, C1 controls; the bidirectional marks, embeddings, overrides and isolates (U+061C, U+200E/F,
# U+202A-E, U+2066-9); the line and paragraph separators a terminal may break a line at; and the invisible
# characters that hide text inside a word (zero-width space, the old Mongolian vowel separator, a byte order mark).
_INVISIBLE = r"\u061c\u180e\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff"
_CONTROL = re.compile(rf"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_CONTROL_KEEPING_LINES = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")  # newlines and tabs kept
_CONTROL_IN_STREAMS = re.compile(rf"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_INVISIBLE}]")  # and \r


def redact(text: str) -> str:
    """`text` with every secret the rules above name replaced by `***`."""
    text = _URI_PASSWORD.sub(rf"\g<scheme>\g<user>\g<colon>{MASK}@", text)
    text = _QUERY_SECRET.sub(rf"\1{MASK}", text)
    text = _ASSIGNED_SECRET.sub(rf"\1{MASK}", text)
    return _CLOUD_KEY_ID.sub(MASK, text)


def redact_value(name: str, value: str) -> str:
    """A param or tag value with secrets masked; its whole value when its name is that of a secret
    (`aws.secret_key`, `MLFLOW_TRACKING_PASSWORD`)."""
    named = redact(f"{name}={value}")
    return named[len(name) + 1 :] if named.startswith(f"{name}=") else redact(value)


def for_terminal(text: str, keep_newlines: bool = False) -> str:
    """`text` with control characters spelled out (`\\x1b`), safe to print; newlines and tabs kept when asked."""
    pattern = _CONTROL_KEEPING_LINES if keep_newlines else _CONTROL
    return pattern.sub(_spelled, text)


def for_stream(text: str) -> str:
    """What a process writes to its terminal, made safe: as for_terminal with newlines and tabs kept, and the
    carriage return too (a progress bar redraws its line with it); ESC, BEL, backspace, C1, bidi marks spelled."""
    return _CONTROL_IN_STREAMS.sub(_spelled, text)


def shown(text: str, keep_newlines: bool = False) -> str:
    """A value from a store or a file as a screen shows it: secrets masked, control characters spelled out."""
    return for_terminal(redact(text), keep_newlines)


_MARKDOWN_LIVE = re.compile(r"[\\`\[\]|]")
_HTML_LIVE = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def markdown_text(text: str) -> str:
    """`text` as plain text inside Markdown: no raw HTML (`<img onerror=...>`, `<svg onload=...>`: `<`, `>`
    and `&` as entities), no link, image or code span (`[`, `]`, a backtick and `\\` escaped), no table cell
    boundary (`|`), no control character; one line."""
    text = "".join(_HTML_LIVE.get(c, c) for c in for_terminal(text))
    return _MARKDOWN_LIVE.sub(lambda m: "\\" + m.group(), text)


def markdown_preformatted(text: str, limit: int = 5000) -> str:
    """Markdown from outside (an imported run's description, which MLflow's UI renders) as a code block: shown as
    written, with nothing in it live (no HTML, link or image; a backtick cannot end the block), control characters
    spelled out, at most `limit` characters. Text that is such a block already is returned as it is."""
    if _is_preformatted(text):
        return text
    body = for_terminal(text, keep_newlines=True).replace("`", "'")[: max(0, limit - 8)]
    return f"```\n{body}\n```"


def _is_preformatted(text: str) -> bool:
    return (
        text.startswith("```\n")
        and text.endswith("\n```")
        and "`" not in text[4:-4]
        and not _CONTROL_KEEPING_LINES.search(text)
    )


def html_text(text: str) -> str:
    """`text` as plain text inside HTML: markup as entities, control characters spelled out (a page is also read
    with `cat`)."""
    import html

    return html.escape(for_terminal(text))


def path_problem(name: str) -> str | None:
    """Why `name` (an experiment's, which names its runs' folder in a SQLite store) could name a path outside
    the folder it is meant for: a separator, a `..`, a leading `~`; None when it is a plain name."""
    if "/" in name or "\\" in name:
        return "a separator (`/` or `\\`)"
    if name.strip() in (".", "..") or name.startswith("~"):
        return f"`{name.strip()}`, which a path reads as a folder"
    return None


def path_prefix(folder: str) -> re.Pattern[str]:
    """Where `folder` begins a path in text: as the whole folder (`/root`, `/root/x`), never as the start of a
    longer name (`/rootpath`) nor inside another path (`/srv/root/x`); a `sqlite:///` or `file://` URI's path
    included."""
    folder = folder.rstrip("/\\")
    return re.compile(rf"(?:(?<=:///)|(?<=file://)|(?<![\w.~/\\-])){re.escape(folder)}(?=[/\\]|$|[^\w.~-])")


def _spelled(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
