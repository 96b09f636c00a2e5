"""scripts/bootstrap.sh's Rust step, as a newcomer without Rust or with an old one meets it.

Each case runs ``bootstrap.sh check-rust`` with a PATH of its own (a few real tools
linked in, fake ``rustc``/``cargo``/``rustup``/``apt-cache`` scripts) and a HOME in
tmp_path, so the real toolchain is never used nor touched, and rustup's installer
is a local file (or an address that refuses), so no test reaches the network.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

BOOTSTRAP = Path(__file__).resolve().parents[2] / "scripts" / "bootstrap.sh"
TOOLS: tuple[str, ...] = (
    "bash",
    "sh",
    "env",
    "awk",
    "sort",
    "head",
    "sed",
    "mktemp",
    "rm",
    "curl",
    "id",
)
TOOLS += ("dirname", "cat", "chmod", "mkdir")
REFUSED = "https://127.0.0.1:9/rustup-init.sh"  # nothing listens on port 9: refused at once


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _fake_rust(bin_dir: Path, version: str) -> None:
    _script(bin_dir / "rustc", f'echo "rustc {version} (0000000 2026-01-01)"\n')
    _script(bin_dir / "cargo", f'echo "cargo {version}"\n')


def _apt_offers(bin_dir: Path, candidate: str) -> None:
    _script(
        bin_dir / "apt-cache",
        f'printf "rustc:\\n  Installed: (none)\\n  Candidate: {candidate}\\n"\n',
    )


@pytest.fixture
def machine(tmp_path: Path) -> tuple[Path, Path]:
    """(bin, home): a PATH directory with the tools the check uses and no Rust, an empty HOME."""
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir()
    home.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run the bootstrap's check"
        (bin_dir / tool).symlink_to(found)
    return bin_dir, home


def _check(bin_dir: Path, home: Path, installer: str = REFUSED) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bin_dir), "HOME": str(home), "VEIL_RUSTUP_URL": installer}
    return subprocess.run(
        ["bash", str(BOOTSTRAP), "check-rust"], env=env, capture_output=True, text=True,
        timeout=120, check=False, executable=shutil.which("bash"),
    )  # fmt: skip


def test_without_rust_and_without_rustup_says_what_to_install(machine: tuple[Path, Path]) -> None:
    bin_dir, home = machine
    done = _check(bin_dir, home)
    assert done.returncode == 1
    assert "no Rust toolchain (cargo, rustc) was found" in done.stdout
    assert "Rust 1.85 or later" in done.stderr
    assert "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y" in done.stderr
    assert "nothing was installed" in done.stderr
    assert "install cargo" not in done.stderr  # no apt here: no distribution hint at all
    assert not (home / ".cargo").exists()


def test_old_rustc_with_old_distribution_cargo_never_hints_apt(machine: tuple[Path, Path]) -> None:
    """Debian 12: `apt install cargo` gives rustc 1.63, so it must not be offered."""
    bin_dir, home = machine
    _fake_rust(bin_dir, "1.63.0")
    _apt_offers(bin_dir, "1.63.0+dfsg1-2")
    done = _check(bin_dir, home)
    assert done.returncode == 1
    assert "rustc 1.63.0" in done.stdout and "is older than 1.85" in done.stdout
    assert "too old for Veil: do not use it" in done.stderr
    assert "apt-get install cargo" not in done.stderr


def test_recent_distribution_cargo_is_offered(machine: tuple[Path, Path]) -> None:
    bin_dir, home = machine
    _apt_offers(bin_dir, "1.85.0+dfsg1-1")
    done = _check(bin_dir, home)
    assert done.returncode == 1
    assert "apt-get install cargo" in done.stderr
    assert "(rustc 1.85.0)" in done.stderr


def test_installs_rust_through_rustup_into_home(machine: tuple[Path, Path], tmp_path: Path) -> None:
    """The installer is fetched and run for the user, without root, into ~/.cargo."""
    bin_dir, home = machine
    _fake_rust(bin_dir, "1.63.0")
    installer = tmp_path / "rustup-init.sh"
    installer.write_text(
        'echo "$@" > "$HOME/installer-args"\n'
        'mkdir -p "$HOME/.cargo/bin"\n'
        'printf \'#!/bin/sh\\necho "rustc 1.95.0 (x 2026-04-14)"\\n\' > "$HOME/.cargo/bin/rustc"\n'
        'printf \'#!/bin/sh\\necho "cargo 1.95.0"\\n\' > "$HOME/.cargo/bin/cargo"\n'
        'chmod 755 "$HOME/.cargo/bin/rustc" "$HOME/.cargo/bin/cargo"\n'
    )
    done = _check(bin_dir, home, installer.as_uri())
    assert done.returncode == 0, done.stderr
    assert "Installing Rust for you with rustup" in done.stdout
    assert "Rust 1.95.0 ok" in done.stdout
    args = (home / "installer-args").read_text().split()
    assert {"-y", "--no-modify-path"} <= set(args)
    # the fake old rustc was not touched
    assert "1.63.0" in (bin_dir / "rustc").read_text()


def test_existing_rustup_updates_the_toolchain(machine: tuple[Path, Path]) -> None:
    bin_dir, home = machine
    _fake_rust(bin_dir, "1.80.0")
    # a rustup whose `toolchain install` brings 1.95: it rewrites the fake rustc beside it
    _script(
        bin_dir / "rustup",
        f'echo "$@" >> "{home}/rustup-calls"\n'
        f'printf \'#!/bin/sh\\necho "rustc 1.95.0 (x)"\\n\' > "{bin_dir}/rustc"\n',
    )
    done = _check(bin_dir, home)
    assert done.returncode == 0, done.stderr
    assert "rustup toolchain install stable" in done.stdout
    calls = (home / "rustup-calls").read_text().splitlines()
    assert calls[0].startswith("toolchain install stable") and calls[1] == "default stable"


def test_recent_rust_is_used_as_it_is(machine: tuple[Path, Path]) -> None:
    bin_dir, home = machine
    _fake_rust(bin_dir, "1.95.0")
    done = _check(bin_dir, home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "bootstrap: Rust 1.95.0 ok"


def test_rustup_toolchain_in_home_wins_over_an_old_system_cargo(machine: tuple[Path, Path]) -> None:
    bin_dir, home = machine
    _fake_rust(bin_dir, "1.63.0")
    _fake_rust(home / ".cargo" / "bin", "1.90.0")
    done = _check(bin_dir, home)
    assert done.returncode == 0, done.stderr
    assert "Rust 1.90.0 ok" in done.stdout
