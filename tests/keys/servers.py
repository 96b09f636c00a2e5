"""A throwaway PyKMIP server (TLS with certificates made here) and a SoftHSM2 token.

Both are real: the PyKMIP server runs as its own process on a free loopback
port, as the tests' PostgreSQL does, and SoftHSM2 (Debian's ``softhsm2``) is
loaded through its PKCS#11 module with a configuration and token directory
of the test's own, so no root and no system token store are needed.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from veil_dev.servers.ports import free_port, port_open

SOFTHSM_MODULES = (
    "/usr/lib/softhsm/libsofthsm2.so",
    "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
)
USER_PIN = "1234"  # a test token's, in a test directory


@dataclass
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certificates(folder: Path) -> Certificates:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (mutual TLS)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "veil test CA")])
    ca = _certificate(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    paths = Certificates(
        *(folder / n for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key"))
    )
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for cert_path, key_path, name, usage in (
        (paths.server_cert, paths.server_key, "127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH),
        (paths.client_cert, paths.client_key, "veil-client", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = _certificate(subject, ca_name, key.public_key(), ca_key, usage=usage)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        key_path.chmod(0o600)
    return paths


def _certificate(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    signing_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(signing_key, hashes.SHA256())


class KmipServer:
    """PyKMIP's own server, TLS 1.2 with client certificates, on a free loopback port."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.certs = make_certificates(folder)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def uri(self, *, certs: Certificates | None = None) -> str:
        c = certs or self.certs
        return f"kmip://127.0.0.1:{self.port}?ca={c.ca}&cert={c.client_cert}&key={c.client_key}"

    def start(self) -> None:
        # PyKMIP's server reads every setting from its configuration file (its
        # command-line flags do not spare one), so the test writes a whole one.
        config = self.folder / "server.conf"
        policies = self.folder / "policies"
        policies.mkdir(exist_ok=True)
        c = self.certs
        settings = {
            "hostname": "127.0.0.1",
            "port": self.port,
            "certificate_path": c.server_cert,
            "key_path": c.server_key,
            "ca_path": c.ca,
            "auth_suite": "TLS1.2",
            "policy_path": policies,
            "enable_tls_client_auth": "True",
            "logging_level": "INFO",
            "database_path": self.folder / "kmip.db",
        }
        config.write_text("[server]\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
        command = [
            sys.executable, "-W", "ignore", "-m", "kmip.services.server.server",
            "--config_path", str(config), "--log_path", str(self.folder / "server.log"),
        ]  # fmt: skip
        # its own process group: PyKMIP forks a process per client connection, which a kill
        # of the server alone left running (ppid 1) after every test run
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the PyKMIP server did not start: {self.log()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            # a throwaway server: its shutdown waits ~10 s for its listener's timeout
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            if self.process.stderr is not None:
                self.process.stderr.close()
            self.process = None

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text()[-2000:] if path.exists() else "(no log)"


def softhsm_module() -> str | None:
    return next((m for m in SOFTHSM_MODULES if Path(m).is_file()), None)


def make_softhsm_token(folder: Path, label: str) -> Path:
    """A SoftHSM2 configuration with one initialised token; returns the configuration."""
    tokens = folder / "tokens"
    tokens.mkdir(parents=True, exist_ok=True)
    config = folder / "softhsm2.conf"
    config.write_text(
        f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n"
    )
    util = shutil.which("softhsm2-util")
    assert util, "softhsm2-util is missing (apt-get install softhsm2)"
    subprocess.run(
        [util, "--init-token", "--free", "--label", label, "--pin", USER_PIN, "--so-pin", "5678"],
        check=True,
        capture_output=True,
        env={**os.environ, "SOFTHSM2_CONF": str(config)},
    )
    return config
