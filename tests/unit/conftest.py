"""Unit-test isolation for modules run in-process."""

from __future__ import annotations

import datetime
import ipaddress

import pytest
from ansible.module_utils.common import warnings as module_warnings

from tests.upstream.server import ForeignOrigin


@pytest.fixture(autouse=True)
def _module_side(monkeypatch):
    """Each test runs on the module side, whatever was imported before it, and leaves the flag as it was.

    Importing any of ansible's controller code (ansible.template, ansible.errors, ansible.parsing, ...)
    sets ``ansible.module_utils._internal.is_controller`` for the whole process, once, at import - often
    while pytest collects a test file (tests/unit/roles/test_site_canary.py imports the Templar). From
    then on ``AnsibleModule.warn()`` goes to the controller's display instead of the module's result,
    and a module test's warnings vanish or not depending on which files ran before it. The unit tests
    run modules in-process and filters and action plugins as plain calls: none needs controller mode.
    """
    from ansible.module_utils import _internal

    monkeypatch.setattr(_internal, "is_controller", False)
    yield


@pytest.fixture(autouse=True)
def _fresh_module_warnings():
    """Each test starts with no warnings or deprecations left by an earlier module run.

    ansible-core keeps them in process-wide dicts and de-duplicates by text, so a warning a
    previous test emitted would otherwise be missing from the next module result.
    """
    module_warnings._global_warnings.clear()  # pylint: disable=protected-access
    module_warnings._global_deprecations.clear()  # pylint: disable=protected-access
    yield


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (the clients run with validate_certs=false)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    top = tmp_path_factory.mktemp("tls")
    (top / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (top / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    return str(top / "cert.pem"), str(top / "key.pem")


@pytest.fixture
def other():
    """One more origin (127.0.0.1, a port of its own), plain http."""
    with ForeignOrigin() as server:
        yield server


@pytest.fixture
def tls_origin(tls_files):
    """An https origin on 127.0.0.1, with the self-signed certificate of ``tls_files``."""
    with ForeignOrigin(tls=tls_files) as server:
        yield server
