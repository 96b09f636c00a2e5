"""Plans made by earlier processes, kept in the client directory, sealed (issue 41).

A fresh process (``veil query``, a script's ``veil.connect``) planned its
first statement from nothing: parsing, describing and planning TPC-DS q01
cost it ~70 ms of its ~0.6 s, although an earlier process had made the very
same plan. ``plans.sealed`` keeps the plans of the process-wide cache
(``veil.session.plan_cache``) for the next process:

- **What it holds**: up to ``MAX_PLANS`` cached plans (pickled) under their
  plan-cache keys, which hold the statement's text, its parameter values
  with their types, the planner's settings and the design file's stamp. The
  plans hold encrypted constants and the statement's own, so the file is
  sealed (``veil.keys.sealed_file``: AES-256-GCM under a key derived from
  the master key for this purpose, version byte, mode 0600). Unpickling runs
  only on what that tag vouches for: nobody without the master key can
  write a file this reads.
- **When it is ignored**: the header names the SHA-256 of the design file and
  of the server's settings, the master key's fingerprint and a stamp of
  Veil's own code (its modules' sizes and times), so a plan is never read
  under another design (a peel, DDL, a redesign), another server (``veil
  config``: its SQL is rendered for one engine), another key (a re-key) or
  another version of the planner whose plans may mean something else. A file that does not open
  or does not match is read as empty and replaced on the next save.
- **What is left out**: plans kept as their shape's template (their trust is
  earned run by run in a process: ``veil.session.templates``), a
  transaction's own plans, and the plans of sessions that read the trusted
  side's files (``external_access``): only the sandboxed sessions' shared
  cache is kept. A plan's statements rendered for its runs (those with
  run-time filters too, per shape of their filters) are kept by their scan's
  place in the plan: in memory they are keyed by object ids, which mean
  nothing in another process.

Saved when a session closes, if it planned something new or rendered statements
for a plan it read (a plan kept by the load has none: ``workload_plans``), and when
the process exits (a script need not close its connection); several processes
closing at once keep the last one's plans (a lost plan costs its planning).
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import logging
import os
import pickle
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veil.crypto.keys import KeyLabel, MasterKey
from veil.keys.sealed_file import SealedFile

if TYPE_CHECKING:
    from veil.session.plan_cache import CachedPlan, Key
    from veil.sql.plan import SplitPlan

log = logging.getLogger(__name__)
FILE_NAME = "plans.sealed"
VERSION = 1
MAX_PLANS = 64
MAX_PLAN_BYTES = 1 << 20  # a bigger plan is planned again rather than kept
_AAD = b"veil plans.sealed v1 "
_CODE = Path(__file__).resolve().parents[1]  # the veil package


class SealedPlans:
    """One client directory's ``plans.sealed``, opened with its master key."""

    @classmethod
    def of(cls, client_dir: Path, master: MasterKey, settings: Sequence[Path]) -> SealedPlans:
        """The directory's file as this process's sessions under ``master`` share it."""
        key = (str(client_dir.resolve()), master.fingerprint())
        with _OPEN_LOCK:
            found = _OPEN.get(key)
            if found is None:
                found = _OPEN[key] = cls(client_dir, master, settings)
            return found

    def __init__(self, client_dir: Path, master: MasterKey, settings: Sequence[Path]):
        """``settings``: the files a plan depends on (the design, the server's address)."""
        label = KeyLabel("plans", "client-dir")
        self._file = SealedFile(client_dir / FILE_NAME, master, label, _AAD, VERSION)
        self._settings = tuple(settings)
        self._lock = threading.Lock()
        self._read: dict[Key, bytes] | None = None  # the file's plans, pickled, on first use
        self._new: dict[Key, CachedPlan] = {}  # planned here since the last save
        self._dropped: set[Key] = set()  # failed here: out of the file at the next save
        # read from the file, with how many rendered statements it held: one whose runs
        # here rendered more (a plan the load kept: ``workload_plans``) is saved again
        self._loaded: dict[Key, tuple[CachedPlan, int]] = {}

    def get(self, key: Key) -> CachedPlan | None:
        with self._lock:
            if self._read is None:
                try:
                    self._read = self._opened()
                except OSError:  # Veil's code changing under the stamp: plan as before
                    self._read = {}
            new = self._new.get(key)
            found = self._read.get(key)
        if new is not None or found is None:
            return new
        try:
            cached, rendered, shaped = pickle.loads(found)
            cached.plan.rendered.update(_by_id(cached.plan, rendered))
            _shaped_by_id(cached.plan, shaped)
        except Exception:  # (a class that moved: plan it again)
            return None
        with self._lock:
            self._loaded[key] = (cached, len(rendered) + len(shaped))
        return cached

    def add(self, key: Key, cached: CachedPlan) -> None:
        """Keep ``cached`` for the next save (a template never: see the module's notes)."""
        if cached.template is None:
            with self._lock:
                self._new[key] = cached

    def discard(self, key: Key) -> None:
        """``key``'s plan failed when it ran: neither read nor kept any more."""
        with self._lock:
            self._new.pop(key, None)
            self._loaded.pop(key, None)
            if self._read is not None:
                self._read.pop(key, None)
            self._dropped.add(key)

    def forget(self) -> None:
        """Neither read nor keep the plans made before (``PlanCache.clear``); the file's stay
        in it for processes that still match them."""
        with self._lock:
            self._read = {}
            self._new = {}
            self._loaded = {}

    def save(self) -> None:
        """Write the file's plans and the new ones (newest last, bounded), if any are new;
        never fails its caller (closing a session): a plan not kept is planned again."""
        with self._lock:
            grown = self._rendered_here()
            if not self._new and not self._dropped and not grown:
                return
            new, self._new = {**grown, **self._new}, {}
            dropped, self._dropped = self._dropped, set()
        try:
            self._save(new, dropped)
        except Exception as exc:  # (e.g. a module file removed while the stamp was taken)
            log.info("plans not kept for later processes (%s)", type(exc).__name__)

    def _rendered_here(self) -> dict[Key, CachedPlan]:
        """The plans read from the file whose runs here rendered statements it did not hold
        (each counted as read again from now on)."""
        grown: dict[Key, CachedPlan] = {}
        for key, (cached, held) in self._loaded.items():
            now = len(_by_place(cached.plan)) + len(_shaped_by_place(cached.plan))
            if now > held:
                grown[key] = cached
                self._loaded[key] = (cached, now)
        return grown

    def _save(self, new: dict[Key, CachedPlan], dropped: set[Key]) -> None:
        plans = self._opened()  # another process may have saved meanwhile
        for key in dropped | set(new):
            plans.pop(key, None)
        for key, cached in new.items():  # the newest last: the first out past MAX_PLANS
            pickled = _pickled(cached)
            if pickled is not None:
                plans[key] = pickled
        kept = dict(list(plans.items())[-MAX_PLANS:])
        self._file.write(pickle.dumps((self._header(), kept), protocol=5))
        with self._lock:
            self._read = kept

    def _opened(self) -> dict[Key, bytes]:
        body = self._file.read()
        if body is None:
            return {}
        try:
            header, plans = pickle.loads(body)
        except Exception:  # (sealed by us, but not this version's layout)
            return {}
        if header != self._header() or not isinstance(plans, dict):
            return {}
        return plans

    def _header(self) -> tuple[str, ...]:
        return (self._file.fingerprint(), *map(_digest, self._settings), code_stamp())


_OPEN: dict[tuple[str, str], SealedPlans] = {}
_OPEN_LOCK = threading.Lock()


@atexit.register
def _save_at_exit() -> None:
    """The new plans of sessions never closed are kept when the process exits: a script
    that ends without closing its connection planned its statements for nothing else."""
    with _OPEN_LOCK:
        opened = list(_OPEN.values())
    for sealed in opened:
        sealed.save()  # (never fails: a plan not kept is planned again)


def _pickled(cached: CachedPlan) -> bytes | None:
    """``cached`` and its rendered statements (keyed by place, not object id), pickled;
    None if it cannot be kept."""
    plan = dataclasses.replace(cached.plan, rendered={})
    try:
        places = (_by_place(cached.plan), _shaped_by_place(cached.plan))
        kept = (dataclasses.replace(cached, plan=plan), *places)
        pickled = pickle.dumps(kept, protocol=5)
    except Exception:  # (something in it does not pickle: not kept)
        return None
    return pickled if len(pickled) <= MAX_PLAN_BYTES else None


# A plan's statements, rendered once for its runs (``veil.exec.server.run_kept``), are
# kept under the id of the scan or of the scan's server join they fetch: the same
# objects' places in the plan stand for those ids in the file.
Place = tuple[str, int]


def _by_place(plan: SplitPlan) -> dict[Place, object]:
    rendered = dict(plan.rendered)  # a copy: another thread may be filling it
    places: dict[Place, object] = {}
    for index, scan in enumerate(plan.scans):
        if id(scan) in rendered:
            places["scan", index] = rendered[id(scan)]
        if scan.joined is not None and id(scan.joined) in rendered:
            places["joined", index] = rendered[id(scan.joined)]
    return places


def _by_id(plan: SplitPlan, places: dict[Place, object]) -> dict[int, Any]:
    rendered: dict[int, Any] = {}
    for (kind, index), statement in places.items():
        scan = plan.scans[index]
        rendered[id(scan if kind == "scan" else scan.joined)] = statement
    return rendered


# A statement with run-time filters is kept per shape of its filters on its scan or
# server join (``Scan.shaped``, ``veil.exec.server.run_filtered``), under a key naming
# that object and the scans whose filters it takes by their ids: ``(id, scan ids, filter
# counts), shape``. The file names them by place instead; a read plan's own are replaced,
# so that an id of another process never meets an object of this one (an id reused by
# another scan of the same filter shape would run that scan's statement for this one).
Shaped = dict[tuple[Place, tuple[Place, ...], object, object], object]


def _fetchers(plan: SplitPlan) -> dict[Place, Any]:
    """The plan's scans and server joins by place (a join shared by its members: the first)."""
    found: dict[Place, Any] = {}
    seen: set[int] = set()
    for index, scan in enumerate(plan.scans):
        for kind, item in (("scan", scan), ("joined", scan.joined)):
            if item is not None and id(item) not in seen:
                seen.add(id(item))
                found[kind, index] = item
    return found


def _shaped_by_place(plan: SplitPlan) -> Shaped:
    fetchers = _fetchers(plan)
    place_of = {id(item): place for place, item in fetchers.items()}
    kept: Shaped = {}
    for place, item in fetchers.items():
        for ((_, scans, counts), shape), statement in dict(item.shaped).items():
            members = [place_of[s] for s in scans if s in place_of]
            if len(members) == len(scans):  # (else rendered again: not kept)
                kept[place, tuple(members), counts, shape] = statement
    return kept


def _shaped_by_id(plan: SplitPlan, kept: Shaped) -> None:
    fetchers = _fetchers(plan)
    for item in fetchers.values():
        item.shaped = {}  # what the pickle held: keyed by another process's ids
    for (place, members, counts, shape), statement in kept.items():
        item = fetchers[place]
        ids = tuple(id(fetchers[m]) for m in members)
        item.shaped[(id(item), ids, counts), shape] = statement


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


_CODE_STAMP: list[str] = []


def code_stamp() -> str:
    """Veil's own code as installed (each module's size and time): a plan pickled by
    other code is not read. ~1 ms, once per process."""
    if not _CODE_STAMP:
        stamps: list[str] = []
        _stamp_tree(str(_CODE), stamps)
        _CODE_STAMP.append(hashlib.sha256("".join(sorted(stamps)).encode()).hexdigest())
    return _CODE_STAMP[0]


def _stamp_tree(directory: str, stamps: list[str]) -> None:
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                _stamp_tree(entry.path, stamps)
            elif entry.name.endswith((".py", ".so")):
                status = entry.stat()  # OSError (a file gone meanwhile): nothing is kept
                stamps.append(f"{entry.path}:{status.st_size}:{status.st_mtime_ns};")
