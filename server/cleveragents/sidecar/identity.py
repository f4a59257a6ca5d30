"""Who calls: an ``Identity`` (a named credential, its roles and its governance policy) and
what its roles let it do to runs that other identities own.

A run belongs to the identity that started it. Its owner may do anything with it; another
identity only what a role grants: ``observer`` reads every run (``GetRun``, ``WatchRun``,
``GetRunHistory``, ``ListRuns``), ``approver`` reads every run and decides its approvals,
``admin`` does everything (cancelling included). The transport resolves the caller; the core
never sees it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

__all__ = [
    "ANONYMOUS", "DEFAULT_IDENTITY", "ROLES", "Access", "Identity", "normal_subject",
    "roles_granting",
]  # fmt: skip

#: The roles an identity may hold.
ROLES = ("observer", "approver", "admin")


class Access(enum.Enum):
    """What a call does to a run, and so which role lets a non-owner do it."""

    #: ``GetRun``, ``WatchRun``, ``GetRunHistory``, ``ListRuns`` (and ``FollowRun``).
    READ = "read"
    #: ``DecideApproval``.
    DECIDE = "decide"
    #: ``CancelRun``.
    CONTROL = "control"


#: The roles that grant each access to another identity's run.
_GRANTS = {
    Access.READ: frozenset({"observer", "approver", "admin"}),
    Access.DECIDE: frozenset({"approver", "admin"}),
    Access.CONTROL: frozenset({"admin"}),
}


@dataclass(frozen=True, slots=True)
class Identity:
    """A caller the sidecar knows by name.

    ``policy`` names the governance policy its runs get ("" is the default policy).
    """

    name: str
    roles: frozenset[str] = frozenset()
    policy: str = ""

    def __post_init__(self) -> None:
        if unknown := sorted(self.roles - set(ROLES)):
            raise ValueError(f"unknown role(s) {', '.join(unknown)}; known: {', '.join(ROLES)}")

    def may(self, access: Access, owner: str) -> bool:
        """Whether this identity may ``access`` a run that ``owner`` owns."""
        return owner == self.name or not self.roles.isdisjoint(_GRANTS[access])


def roles_granting(access: Access) -> tuple[str, ...]:
    """The roles that let an identity ``access`` another's run, in ``ROLES`` order."""
    return tuple(role for role in ROLES if role in _GRANTS[access])


#: The one identity of a sidecar with a single shared token, or with no auth at all: it has
#: every role, so it acts on every run (runs stored before owners were recorded included).
DEFAULT_IDENTITY = Identity("default", frozenset(ROLES))
#: A caller that presented no credentials (only health checking serves one).
ANONYMOUS = Identity("(unauthenticated)")


#: Splits a subject at its commas, but not at an escaped one.
_RDN_SPLIT = re.compile(r"(?<!\\),")


def normal_subject(subject: str) -> frozenset[str]:
    """A certificate subject (``CN=alice,O=Acme``) as its attributes, in any order."""
    parts = (part.strip() for part in _RDN_SPLIT.split(subject))
    return frozenset(
        f"{key.strip().upper()}={value.strip()}"
        for key, _, value in (part.partition("=") for part in parts if part)
    )
