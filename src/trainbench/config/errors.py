"""ConfigError and the one-line form of everything Hydra and OmegaConf can say about a bad command line.

Whatever a user types, the answer is one line naming the key, the bad value and what to do. Hydra's own
messages are multi-line and sometimes give advice that leads nowhere ("use +lr=0.1" for a key that does
not exist anywhere); `explain` turns each of them into a ConfigError with advice that works.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import Any


class ConfigError(ValueError):
    """A config value that cannot work. str() is the one line shown to the user."""

    def __init__(self, key: str, value: Any, expected: str) -> None:
        self.key, self.value, self.expected = key, value, expected
        shown = value if not isinstance(value, str) else (value if len(value) <= 80 else value[:77] + "...")
        super().__init__(f"`{key}`={shown!r} is not valid: {expected}")


class PlainError(ConfigError):
    """A problem that is not one key's value (an empty sweep, a missing dataset): the message as it is."""

    def __init__(self, key: str, message: str) -> None:
        ValueError.__init__(self, message)
        self.key, self.value, self.expected = key, None, message


def need(ok: bool, key: str, value: Any, expected: str) -> None:
    """Raise ConfigError(key, value, expected) unless `ok`."""
    if not ok:
        raise ConfigError(key, value, expected)


# Keys that moved when each config group got its own typed choices: say where they went.
MOVED_KEYS = {
    "epochs": "task.epochs (train task), e.g. task.epochs=2",
    "compile": "optimize.compile, e.g. optimize.compile=true (or optimize=fast for every speed-up at once)",
    "channels_last": "framework.channels_last (framework=pytorch), e.g. framework.channels_last=true",
    "optim.name": "the optim group: optim=sgd, optim=adam or optim=adamw",
    "model.transformers": "model.family",
    # PyTorch's own speed-ups left the shared optimize group for PyTorch's config (optimize=fast still turns them on)
    **{
        f"optimize.{knob}": f"framework.{knob} (framework=pytorch), e.g. framework.{knob}={example}"
        for knob, example in (
            ("channels_last", "true"),
            ("fused_optimizer", "true"),
            ("capture", "true"),
            ("coordinate_descent_tuning", "true"),
            ("compile_mode", "max-autotune"),
        )
    },
    "model.torch_compile_mode": "framework.compile_mode (framework=pytorch), e.g. framework.compile_mode=reduce-overhead",
}
# Keys that are gone, and why: a model YAML no longer names each framework's builder.
RETIRED_KEYS = {
    f"model.{builder}": "a model no longer names its builders: each framework keys its own by the model's name "
    "(or family) in trainbench/frameworks/<framework>/__init__.py; drop the override, or choose another model"
    for builder in ("torchvision", "keras", "mlx", "keras_hub")
}


def unknown_key(
    key: str,
    known_keys: Iterable[str],
    describe_group: Callable[[str], str | None],
    choices_having: Callable[[str, str], list[str]] = lambda group, field: [],
) -> ConfigError:
    """`key` is not a setting anywhere: say where it moved, or which keys are close, never "use +key"."""
    bare = key.lstrip("+~")
    if bare in MOVED_KEYS:
        return PlainError(bare, f"`{bare}` has moved: use {MOVED_KEYS[bare]}")
    if bare in RETIRED_KEYS:
        return PlainError(bare, f"`{bare}` is not a setting any more: {RETIRED_KEYS[bare]}")
    known = sorted(set(known_keys))
    close = difflib.get_close_matches(bare, known, n=3, cutoff=0.6)
    close += [k for k in known if k.endswith("." + bare) and k not in close][:3]
    if "." in bare:
        group, field = bare.split(".", 1)
        described = describe_group(group)
        if described:
            having = choices_having(group, field)
            if having:
                hint = f"; {group}={', '.join(having)} " + ("has it" if len(having) == 1 else "have it")
            else:
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
            return PlainError(bare, f"`{bare}` is not a setting of {described}{hint}")
    if close:
        return PlainError(bare, f"`{bare}` is not a setting; did you mean {' or '.join(close)}?")
    top = sorted({k.split(".", 1)[0] for k in known})
    return PlainError(bare, f"`{bare}` is not a setting; the settings are {', '.join(top)} (see conf/config.yaml)")


_NOT_IN = re.compile(r"Key '([^']+)' not in '([^']+)'")
_COULD_NOT_OVERRIDE = re.compile(r"Could not (?:override|append to|delete from config)[^']*'([^']+)'")


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def key_in_message(message: str) -> str | None:
    for pattern in (_COULD_NOT_OVERRIDE, _NOT_IN):
        found = pattern.search(message)
        if found:
            return found.group(1)
    found = re.search(r"full_key: ([\w.\[\]]+)", message)
    return found.group(1) if found else None
