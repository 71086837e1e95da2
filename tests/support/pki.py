"""Test certificates made on the spot: a CA and leaf certificates it signs (cryptography).

Used by the mTLS tests (``tests/test_mtls.py``: Crossplane's function runtime mounts
``tls.crt``, ``tls.key`` and ``ca.crt``) and by the fake Kubernetes API's HTTPS
(``tests/support/fake_kube_api.py``). Keys are P-256; certificates are valid from five
minutes ago for a day. A CA carries its subject key identifier and a leaf the authority
key identifier, as strict verifiers (OpenSSL's X509_V_FLAG_X509_STRICT) require.
"""

from __future__ import annotations

import datetime
import ipaddress
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=1)
    )


def pem(cert: x509.Certificate) -> bytes:
    """A certificate as PEM."""
    return cert.public_bytes(serialization.Encoding.PEM)


def pem_key(key: Any) -> bytes:
    """A private key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(name: str) -> CA:
    """A self-signed CA certificate named ``name`` and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    cert = (
        _validity(x509.CertificateBuilder())
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_leaf(
    ca: CA, name: str, *, server: bool, rsa_bits: int | None = None
) -> tuple[bytes, bytes]:
    """A certificate for ``name`` signed by ``ca``: ``(cert PEM, key PEM)``.

    A server certificate is for ``localhost`` and ``127.0.0.1``; a client one has the
    client-auth usage. The key is P-256, or RSA of ``rsa_bits`` bits when given.
    """
    ca_cert, ca_key = ca
    key: Any = (
        rsa.generate_private_key(public_exponent=65537, key_size=rsa_bits)
        if rsa_bits
        else ec.generate_private_key(ec.SECP256R1())
    )
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _validity(x509.CertificateBuilder())
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return pem(builder.sign(ca_key, hashes.SHA256())), pem_key(key)
