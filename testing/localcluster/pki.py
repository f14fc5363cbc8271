"""A throw-away PKI for the local control plane.

kubeadm, envtest and kwokctl all mint their own CA for a test cluster; so do
we. Keys are ECDSA P-256 (fast to generate, fine for Go's TLS); the
service-account signing key is RSA, because RS256 is what every token
consumer understands. Nothing here is secret beyond the life of the cluster.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from localcluster.layout import CONTROLLER_MANAGER, SCHEDULER, KeyPair, Layout

SERVICE_IP = "10.0.0.1"
"""ClusterIP of the ``kubernetes`` service: first address of the service range."""

APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "::1", SERVICE_IP)

_CA_LIFETIME = datetime.timedelta(days=3650)
_LEAF_LIFETIME = datetime.timedelta(days=365)
_CLOCK_SKEW = datetime.timedelta(hours=2)

_PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class Authority:
    """A CA that can sign leaf certificates.

    Attributes:
        cert: The self-signed CA certificate.
        key: The CA private key.
    """

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, common_name: str = "leasehold-local-ca") -> Authority:
        """Create a new self-signed CA.

        Args:
            common_name: Subject CN of the CA certificate.

        Returns:
            The new authority.
        """
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cls(cert=cert, key=key)

    def issue(
        self,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        """Issue a leaf certificate with a fresh key.

        Args:
            common_name: Subject CN; Kubernetes reads it as the user name.
            organizations: Subject O values; Kubernetes reads them as groups.
            server: Allow TLS server use (serverAuth).
            client: Allow TLS client use (clientAuth).
            dns_names: DNS subject alternative names.
            ip_addresses: IP subject alternative names.

        Returns:
            The certificate and its private key.

        Raises:
            ValueError: If neither ``server`` nor ``client`` is set.
        """
        usages: list[x509.ObjectIdentifier] = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        if not usages:
            raise ValueError("a leaf certificate needs server or client usage")
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _LEAF_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


def cert_pem(cert: x509.Certificate) -> bytes:
    """Encode a certificate as PEM.

    Args:
        cert: The certificate.

    Returns:
        PEM bytes.
    """
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: _PrivateKey) -> bytes:
    """Encode a private key as unencrypted PEM (SEC1 or PKCS#1, which Go reads).

    Args:
        key: The private key.

    Returns:
        PEM bytes.
    """
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _write_pair(pair: KeyPair, cert: x509.Certificate, key: _PrivateKey) -> None:
    _write(pair.cert, cert_pem(cert))
    _write(pair.key, key_pem(key), private=True)


def create_pki(layout: Layout) -> Authority:
    """Write a fresh CA, every certificate and the service-account keys.

    Existing files are overwritten: each start of a cluster gets a new PKI,
    just as it gets a new etcd.

    Args:
        layout: The cluster's paths; files go to ``layout.pki_dir``.

    Returns:
        The new CA, for the caller to sign more (e.g. kubeconfigs embed it).
    """
    ca = Authority.create()
    _write_pair(layout.ca, ca.cert, ca.key)
    _write_pair(
        layout.apiserver_serving,
        *ca.issue(
            "kube-apiserver",
            server=True,
            dns_names=APISERVER_DNS_NAMES,
            ip_addresses=APISERVER_IPS,
        ),
    )
    front_proxy = Authority.create("leasehold-local-front-proxy-ca")
    _write_pair(layout.front_proxy_ca, front_proxy.cert, front_proxy.key)
    _write_pair(layout.front_proxy_client, *front_proxy.issue("front-proxy-client", client=True))
    _write_pair(layout.admin, *ca.issue("admin", organizations=["system:masters"], client=True))
    for component in (CONTROLLER_MANAGER, SCHEDULER):
        _write_pair(layout.client(component), *ca.issue(f"system:{component}", client=True))
        _write_pair(
            layout.serving(component),
            *ca.issue(
                component,
                server=True,
                dns_names=["localhost"],
                ip_addresses=["127.0.0.1"],
            ),
        )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(layout.service_account.key, key_pem(sa_key), private=True)
    _write(
        layout.service_account.cert,
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return ca
