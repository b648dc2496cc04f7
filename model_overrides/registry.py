"""The patch registry: probe, apply, verify, and one status line per patch."""

import enum
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

# A child of "vllm" so the lines appear in vLLM's own log output.
logger = logging.getLogger("vllm.dsv4_overrides")

DISABLE_ALL_ENV = "DSV4_OVERRIDES"  # "0"/"off"/"false" turns every patch off
DISABLE_SOME_ENV = "DSV4_OVERRIDES_DISABLE"  # comma-separated patch names
# Comma-separated patch names a process must not start without (a bench model's engine
# needs the dummy-weights patch: without it, it would measure garbage weights).
REQUIRE_ENV = "DSV4_REQUIRE_PATCHES"
DUMMY_WEIGHTS_PATCH = "dsv4-dummy-weights"  # named here so the serving side need not import it
GUARD_PATCH = "adaptive-speculation-guard"  # required wherever the guard is configured


class RequiredPatchError(RuntimeError):
    """A patch the process was told it needs did not apply; the message names it."""


class Need(enum.Enum):
    NEEDED = "needed"
    NOT_NEEDED = "not needed"
    NOT_APPLICABLE = "not applicable"
    ALREADY_APPLIED = "already applied"
    UNRECOGNISED = "unrecognised"


class Outcome(enum.Enum):
    APPLIED = "applied"
    NOT_NEEDED = "not needed"
    NOT_APPLICABLE = "not applicable"
    DISABLED = "disabled"
    UNRECOGNISED = "unrecognised"
    FAILED = "failed"


@dataclass(frozen=True)
class Probe:
    need: Need
    detail: str


@dataclass
class Patch:
    name: str
    override: str  # "deepseek_v4" or "deepseek_v4_mtp"
    summary: str
    probe: Callable[[], Probe]
    apply: Callable[[], None]
    verify: Callable[[], str | None]  # None when verified, else what is wrong
    gpu_note: str = ""  # whether the same code path exists on the GPU variants
    upstream: str = ""  # where the problem is tracked upstream, or "ours, not reported"
    remove_when: str = ""  # the condition under which the patch can go


@dataclass(frozen=True)
class Status:
    name: str
    override: str
    outcome: Outcome
    detail: str


@dataclass
class Registry:
    patches: list[Patch] = field(default_factory=list)
    results: dict[str, Status] = field(default_factory=dict)

    def add(self, patch: Patch) -> Patch:
        if any(p.name == patch.name for p in self.patches):
            raise ValueError(f"duplicate patch name {patch.name!r}")
        self.patches.append(patch)
        return patch

    def names(self) -> list[str]:
        return [p.name for p in self.patches]

    def _disabled(self) -> set[str] | None:
        """None when all are off; else the names switched off one by one."""
        if os.environ.get(DISABLE_ALL_ENV, "1").strip().lower() in {"0", "off", "false", "no"}:
            return None
        raw = os.environ.get(DISABLE_SOME_ENV, "")
        names = {n.strip() for n in raw.split(",") if n.strip()}
        unknown = names - set(self.names())
        if unknown:
            logger.warning(
                "%s names unknown patches %s; known: %s",
                DISABLE_SOME_ENV,
                sorted(unknown),
                ", ".join(self.names()),
            )
        return names

    def _run_one(self, patch: Patch, disabled: set[str] | None) -> Status:
        def status(outcome: Outcome, detail: str) -> Status:
            return Status(patch.name, patch.override, outcome, detail)

        if disabled is None:
            return status(Outcome.DISABLED, f"all overrides off ({DISABLE_ALL_ENV}=0)")
        if patch.name in disabled:
            return status(Outcome.DISABLED, f"listed in {DISABLE_SOME_ENV}")
        try:
            probe = patch.probe()
        except Exception as exc:  # a probe that crashes is code we do not recognise
            return status(Outcome.UNRECOGNISED, f"probe raised {type(exc).__name__}: {exc}")
        if probe.need is Need.NOT_NEEDED:
            return status(Outcome.NOT_NEEDED, probe.detail)
        if probe.need is Need.NOT_APPLICABLE:
            return status(Outcome.NOT_APPLICABLE, probe.detail)
        if probe.need is Need.UNRECOGNISED:
            return status(Outcome.UNRECOGNISED, probe.detail)
        if probe.need is Need.NEEDED:
            try:
                patch.apply()
            except Exception as exc:
                return status(Outcome.FAILED, f"apply raised {type(exc).__name__}: {exc}")
        problem = patch.verify()
        if problem:
            return status(Outcome.FAILED, f"verify: {problem}")
        return status(Outcome.APPLIED, probe.detail)

    def check_required(self, raw: str | None = None) -> None:
        """Raise unless every patch named in ``raw`` (default ``DSV4_REQUIRE_PATCHES``) applied."""
        raw = os.environ.get(REQUIRE_ENV, "") if raw is None else raw
        problems = []
        for name in sorted({n.strip() for n in raw.split(",") if n.strip()}):
            if name not in self.names():
                problems.append(f"{name}: no such patch (known: {', '.join(self.names())})")
            elif (st := self.results.get(name)) is None or st.outcome is not Outcome.APPLIED:
                found = f"{st.outcome.value} ({st.detail})" if st else "not run"
                problems.append(f"{name}: {found}")
        if problems:
            raise RequiredPatchError(
                f"[dsv4-overrides] {REQUIRE_ENV} names patches that did not apply: "
                f"{'; '.join(problems)}. Refusing to start rather than run without them."
            )

    def apply_all(self) -> list[Status]:
        disabled = self._disabled()
        statuses = []
        for patch in self.patches:
            st = self._run_one(patch, disabled)
            self.results[patch.name] = st
            statuses.append(st)
            log = (
                logger.warning
                if st.outcome in (Outcome.UNRECOGNISED, Outcome.FAILED)
                else logger.info
            )
            log("[dsv4-overrides] %s: %s (%s)", patch.name, st.outcome.value, st.detail)
        return statuses


REGISTRY = Registry()
