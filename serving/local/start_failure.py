"""Why a start failed, in one line: the first real error in the logs, named by kind.

A failed replica leaves a trail of wrapped errors (Serve's "failed to start", Ray's
actor errors, vLLM's "Engine core initialization failed. See root cause above"); the
root cause is an earlier exception line in the engine's output. The logs arrive in
Ray's forms: worker lines prefixed ``(ServeReplica:dsv4:Dsv4Server pid=N)``, vLLM's
``(EngineCore pid=N) ERROR 12-01 21:36:29 [core.py:1]``, Serve's ``ERROR 2026-12-01
21:36:29,123 serve 21477 --`` and Ray Serve LLM's single-line JSON records.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass

MAX_DETAIL = 300  # characters of the error kept in the one line

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RAY_PREFIX = re.compile(r"^\((?:[^()]*?\bpid=[^)]*|raylet|autoscaler[^)]*)\)\s?")
_LEVELS = "DEBUG|INFO|WARNING|ERROR|CRITICAL"
_VLLM_PREFIX = re.compile(rf"^(?P<level>{_LEVELS}) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?")
_SERVE_PREFIX = re.compile(rf"^(?P<level>{_LEVELS}) \d{{4}}-\d\d-\d\d [\d:,.]+ \S+ \S+ -- ")
# A Python exception line, as a traceback ends: `ValueError: ...`, `torch.OutOfMemoryError: ...`
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Failure))(?::\s*(?P<msg>.*))?$"
)
_PYDANTIC = re.compile(r"\d+ validation errors? for")

# Errors that only wrap or report another one: used when nothing better is found.
_WRAPPERS = re.compile(
    r"Engine core initialization failed|RayTaskError|RayActorError|ActorDiedError|"
    r"ActorUnavailableError|DeploymentUnavailable|failed to start|The actor died|"
    r"CancelledError|KeyboardInterrupt|SystemExit|TaskCancelledError|"
    r"worker died or was killed|RayServeException|EngineDeadError|EngineGenerateError|"
    r"Traceback \(most recent call last\)"
)

# (kind, pattern on the error text), first match wins; kinds a person can act on.
KINDS: list[tuple[str, re.Pattern[str]]] = [
    (
        "port in use",
        re.compile(r"address already in use|errno 98\b|cannot bind socket|port \d+ .*in use", re.I),
    ),
    (
        "out of memory",
        re.compile(
            r"out of memory|OutOfMemoryError|cannot allocate memory|can't allocate memory|"
            r"less than requested memory|errno 12\b|no available memory for the cache|"
            r"insufficient memory|not enough memory",
            re.I,
        ),
    ),
    (
        "missing kernel op",
        re.compile(
            r"no such operator|_OpNamespace.* has no attribute|could not run '[^']+' with "
            r"arguments from the|operator \S+ does not exist|undefined symbol|"
            r"no kernel image is available",
            re.I,
        ),
    ),
    (
        "model files",
        re.compile(r"no such file or directory|not a directory|permission denied", re.I),
    ),
    (
        "bad preset value",
        re.compile(
            r"^(?:\S*\.)?(?:ValidationError|ValueError|TypeError|ArgumentError)\b|"
            r"validation errors? for|Value error,|Failed to create vLLM engine config"
        ),
    ),
]
SPECIFIC = {"port in use", "out of memory", "missing kernel op", "model files"}


@dataclass(frozen=True)
class Cause:
    kind: str  # a kind of KINDS, "engine died" or "error"
    detail: str  # the error as logged, one line

    def line(self, log: object | None = None) -> str:
        where = f" (full log: {log})" if log else ""
        return f"failed to start: {self.kind}: {self.detail}{where}"


def parse(line: str) -> tuple[str, str]:
    """(level, message) of one log line: Ray's, vLLM's and Serve's prefixes dropped, a
    JSON record reduced to its level and message (and exception text)."""
    text = _ANSI.sub("", line).strip()
    while (match := _RAY_PREFIX.match(text)) is not None:
        text = text[match.end() :]
    level = ""
    if text.startswith("{") and text.endswith("}"):
        try:
            record = json.loads(text)
        except ValueError:
            record = None
        if isinstance(record, dict) and "message" in record:
            level = str(record.get("levelname", ""))
            text = str(record["message"]).strip()
            if record.get("exc_text"):
                text += "\n" + str(record["exc_text"])
    for prefix in (_VLLM_PREFIX, _SERVE_PREFIX):
        if match := prefix.match(text):
            level, text = match.group("level"), text[match.end() :]
    return level, text.strip()


def kind_of(text: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(text):
            return kind
    return "error"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def engine_died(text: str) -> Cause | None:
    """vLLM's ``Failed core proc(s): {'EngineCore': -9}``: a signal, often the OOM killer;
    ``{}`` when the engine process vanished before its exit code was read."""
    match = re.search(r"Failed core proc\(s\): \{([^}]*)\}", text)
    if not match:
        return None
    codes = [int(code) for code in re.findall(r"-?\d+", match.group(1))]
    if not codes:
        return Cause(
            "engine died",
            "the engine process died while it loaded and logged no error (killed from "
            "outside? the kernel's out-of-memory killer leaves a line in dmesg)",
        )
    code = codes[0]
    if code >= 0:
        return Cause("engine died", f"the engine process exited with code {code}")
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    why = f"the engine process was killed by {name}"
    if name == "SIGKILL":
        why += " (the kernel's out-of-memory killer sends it: see dmesg)"
    return Cause("engine died", why)


def find_cause(lines: Iterable[str]) -> Cause | None:
    """The first real error in ``lines``: the first exception of a kind a person can act
    on (port, memory, kernel op, model files), else such an ERROR line, else the first
    exception that is not a wrapper, else an engine that died, else the first wrapper,
    else the first ERROR line."""
    parsed = [parse(line) for line in lines]
    exceptions: list[str] = []
    errors: list[str] = []
    died: Cause | None = None
    for i, (level, text) in enumerate(parsed):
        for part in text.splitlines() or [""]:
            part = part.strip()
            died = died or engine_died(part)
            if part.endswith("Traceback (most recent call last):"):
                continue  # Serve's wrapper of the real traceback, which follows
            if _EXCEPTION.match(part):
                if _PYDANTIC.search(part):  # pydantic puts the details on the next lines
                    follow = [
                        t for _, t in parsed[i + 1 : i + 4] if t and "errors.pydantic.dev" not in t
                    ]
                    part = " ".join([part, *follow[:2]])
                exceptions.append(part)
            elif level in {"ERROR", "CRITICAL"} or part.startswith("[ALERT]"):
                errors.append(part)
    real = [text for text in exceptions if not _WRAPPERS.search(text)]
    for candidates in (real, errors):
        for text in candidates:
            if kind_of(text) in SPECIFIC:
                return Cause(kind_of(text), _short(text))
    for candidates in (real, [died] if died else [], exceptions, errors):
        for item in candidates:
            if isinstance(item, Cause):
                return item
            return Cause(kind_of(item), _short(item))
    return None


def from_exception(exc: BaseException) -> Cause:
    """A cause from an exception raised in this process (with the ones it chains)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    lines = []
    for error in reversed(chain):
        name = type(error).__name__
        lines += [f"{name}: {part}" for part in (str(error).splitlines() or [""])[:1]]
        lines += str(error).splitlines()[1:]
    cause = find_cause(lines) or Cause("error", _short(lines[-1]))
    if cause.kind == "bad preset value" and not any("ValidationError" in line for line in lines):
        # A ValueError raised here is as likely ours as the preset's: say no more than it does.
        return Cause("error", cause.detail)
    return cause
