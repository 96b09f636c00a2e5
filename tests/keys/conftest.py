"""The key providers' servers: one PyKMIP server and one SoftHSM2 configuration per run."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from tests.keys.servers import USER_PIN, KmipServer, make_softhsm_token, softhsm_module


def require(module: str, reason: str) -> None:
    """Skip where ``module`` cannot be installed; in CI (``CI`` set) fail instead: the
    bootstrap installs the keys extra and SoftHSM2, so a missing one there is a bug."""
    if importlib.util.find_spec(module) is None:  # found, not imported: PyKMIP warns on import
        missing(reason)


def missing(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}, and CI must run the key providers' tests")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def kmip_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KmipServer]:
    require("kmip", "PyKMIP is not installed (pip install -e '.[keys]')")
    server = KmipServer(tmp_path_factory.mktemp("kmip"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def softhsm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The module path; SOFTHSM2_CONF points at tokens ``veil`` and ``veil-2`` of this run.

    SoftHSM reads its configuration once per process (when python-pkcs11 first
    loads the module), so the whole run shares it.
    """
    pytest.importorskip(
        "pkcs11", reason="python-pkcs11 is not installed (pip install -e '.[keys]')"
    )
    module = softhsm_module()
    if module is None:
        pytest.skip("SoftHSM2 is not installed (apt-get install softhsm2)")
    folder = tmp_path_factory.mktemp("softhsm")
    config = make_softhsm_token(folder, "veil")
    make_softhsm_token(folder, "veil-2")
    saved = {k: os.environ.get(k) for k in ("SOFTHSM2_CONF", "VEIL_PKCS11_PIN")}
    os.environ["SOFTHSM2_CONF"] = str(config)
    os.environ["VEIL_PKCS11_PIN"] = USER_PIN
    try:
        yield module
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def pkcs11_uri(module: str, token: str = "veil") -> str:
    return f"pkcs11:token={token};object=veil-kek?module-path={module}"


@pytest.fixture
def key_path(tmp_path: Path) -> Path:
    return tmp_path / "client.key"
