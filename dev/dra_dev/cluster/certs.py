"""Local PKI for the embedded control plane: a CA, serving and client certificates, the SA key.

Everything is ECDSA P-256 (fast to generate, accepted by every component) and lives in the
cluster directory; nothing is trusted system-wide.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class PKI:
    """Paths of the files `write_pki` creates."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.directory / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.directory / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    def complete(self) -> bool:
        return all(
            p.is_file()
            for p in (self.ca_cert, self.ca_key, self.serving_cert, self.serving_key,
                      self.admin_cert, self.admin_key, self.sa_key, self.sa_pub)
        )


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def write_pki(directory: Path, service_ip: str = "10.0.0.1") -> PKI:
    """Create the PKI once; an existing complete set is reused so restarts keep kubeconfigs valid."""
    pki = PKI(directory)
    if pki.complete():
        return pki
    directory.mkdir(parents=True, exist_ok=True)

    ca, ca_key = new_ca("dra-embedded-ca")
    write_pair(pki.ca_cert, pki.ca_key, ca, ca_key)
    serving, serving_key = new_serving_cert(
        ca, ca_key, "kube-apiserver",
        ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"], ["127.0.0.1", service_ip])
    write_pair(pki.serving_cert, pki.serving_key, serving, serving_key)

    def leaf(cn: str, org: str | None, usage: x509.ObjectIdentifier) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = _key()
        b = _builder(_name(cn, org), ca.subject, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        return b.sign(ca_key, hashes.SHA256()), key

    admin, admin_key = leaf("dra-admin", "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH)
    write_pair(pki.admin_cert, pki.admin_key, admin, admin_key)

    sa_key = _key()
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki


def issue_client_cert(pki: PKI, cert_path: Path, key_path: Path, cn: str, org: str | None = None) -> None:
    """A client certificate signed by the cluster CA (e.g. a kubelet's `system:node:<name>` in
    `system:nodes`); an existing one for the same subject and CA is kept."""
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    subject = _name(cn, org)
    if cert_path.is_file() and key_path.is_file():
        old = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if old.subject == subject and old.issuer == ca.subject:
            return
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pki.ca_key} is not an EC key")
    key = _key()
    cert = (
        _builder(subject, ca.subject, key.public_key())
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
def new_ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA (certificate, key) named `cn`, valid for a year."""
    key = _key()
    name = _name(cn)
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def new_serving_cert(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, cn: str,
                     dns_names: list[str], ips: list[str]) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A TLS server certificate signed by `ca` for the given DNS names and IP addresses."""
    key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        _builder(_name(cn), ca.subject, key.public_key())
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def write_pair(cert_path: Path, key_path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    """The certificate (PEM) and its key (PKCS#8 PEM, mode 0600)."""
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
