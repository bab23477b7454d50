"""Types of the API's documents (docs/API.md, docs/POLICY.md)."""
from __future__ import annotations

from typing import Literal, TypedDict, Union


class StringMatch(TypedDict, total=False):
    """Exactly one of exact, startsWith, regex."""
    exact: str
    startsWith: str
    regex: str


class KeyValueMatch(TypedDict, total=False):
    key: StringMatch
    value: StringMatch


class NetworkPolicyMatch(TypedDict, total=False):
    path: StringMatch
    method: list[str]
    queryString: list[KeyValueMatch]
    headers: list[KeyValueMatch]


class HeaderTransform(TypedDict):
    headers: dict[str, str]


class NetworkPolicyRule(TypedDict, total=False):
    """``transform`` (headers to add) or ``forwardURL``, with an optional ``match``."""
    match: NetworkPolicyMatch
    transform: list[HeaderTransform]
    forwardURL: str


class Subnets(TypedDict, total=False):
    allow: list[str]
    deny: list[str]


class NetworkPolicyObject(TypedDict, total=False):
    allow: Union[list[str], dict[str, list[NetworkPolicyRule]]]
    subnets: Subnets


NetworkPolicy = Union[Literal["allow-all", "deny-all"], NetworkPolicyObject]
"""``"allow-all"``, ``"deny-all"`` or an allowlist object (docs/POLICY.md)."""


class GitSource(TypedDict, total=False):
    type: Literal["git"]
    url: str
    depth: int
    revision: str
    username: str
    password: str


class TarballSource(TypedDict, total=False):
    type: Literal["tarball"]
    url: str
    path: str


class SnapshotSource(TypedDict, total=False):
    type: Literal["snapshot"]
    snapshotId: str
    snapshot_id: str  # accepted as well, sent as snapshotId


Source = Union[GitSource, TarballSource, SnapshotSource]


class Resources(TypedDict, total=False):
    vcpus: int
    diskMiB: int


class VolumeMount(TypedDict, total=False):
    """A volume to mount at create: ``name`` (the volume's), ``path`` (an
    absolute path inside the sandbox), ``readOnly`` (also accepted as
    ``read_only``, sent as readOnly; default False)."""
    name: str
    path: str
    readOnly: bool
    read_only: bool  # accepted as well, sent as readOnly


class VolumeUsage(TypedDict):
    """What a volume holds now: bytes and inodes in use."""
    usedBytes: int
    usedInodes: int


class FileEntry(TypedDict, total=False):
    """For write_files: ``content`` as bytes or str (UTF-8)."""
    path: str
    content: Union[bytes, str]
    mode: int
    xattrs: dict[str, str]


class Tty(TypedDict):
    rows: int
    cols: int


class LogLine(TypedDict):
    """One piece of a command's output."""
    stream: Literal["stdout", "stderr"]
    data: bytes
