"""A store behaves like a dict: random operation sequences against a model.

APPEND mode runs the same model with ``settle`` steps (close the epoch, merge
and delete everything); between settles keys arrive in any order, which stays
within the APPEND contract because a merge only ever sees one epoch's keys
above the merged frontier.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import veil.kv
from veil.crypto.keys import write_key_file
from veil.kv import Store

KEYS = st.integers(-30, 30)
VALUES = st.binary(max_size=40)


class StoreModel(RuleBasedStateMachine):
    mode = "generic"

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.TemporaryDirectory()
        root = Path(self.directory.name)
        write_key_file(root / "key")
        self.store: Store = veil.kv.open(
            f"sqlite:///{root}/kv.db", root / "key", self.mode, pack_rows=2, background=False
        )
        self.model: dict[int, bytes] = {}

    @rule(key=KEYS, value=VALUES)
    def put(self, key: int, value: bytes) -> None:
        self.store.put(key, value)
        self.model[key] = value

    @rule(items=st.dictionaries(KEYS, VALUES, max_size=8))
    def put_many(self, items: dict[int, bytes]) -> None:
        self.store.put_many(items)
        self.model.update(items)

    @rule(key=KEYS)
    def delete(self, key: int) -> None:
        self.store.delete(key)
        self.model.pop(key, None)

    @rule(key=KEYS)
    def get(self, key: int) -> None:
        assert self.store.get(key) == self.model.get(key)

    @rule(low=KEYS, high=KEYS)
    def range(self, low: int, high: int) -> None:
        expected = sorted((k, v) for k, v in self.model.items() if low <= k <= high)
        assert list(self.store.range(low, high)) == expected

    @precondition(lambda self: self.mode == "append")
    @rule()
    def settle(self) -> None:
        self.store.settle()

    @invariant()
    def everything_visible(self) -> None:
        assert dict(self.store.range(-30, 30)) == self.model

    def teardown(self) -> None:
        self.store.close()
        self.directory.cleanup()


class AppendStoreModel(StoreModel):
    mode = "append"


SETTINGS = settings(
    max_examples=15,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize("machine", [StoreModel, AppendStoreModel])
def test_store_matches_dict_model(machine: type[StoreModel]) -> None:
    machine.TestCase.settings = SETTINGS
    machine.TestCase().runTest()
