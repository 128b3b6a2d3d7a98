"""TLS certificates and SuperNode keys for a Flower deployment of fedlib (development and rehearsal use:
for production, have your organisation's CA sign the SuperLink's certificate).

    python deploy/flower/credentials.py DIR [--nodes N] [--host NAME_OR_IP ...]

writes into DIR: ca.crt and ca.key (a certificate authority), server.pem and server.key (the SuperLink's
certificate for the given hosts, signed by the CA; default 127.0.0.1 and localhost), and node<i> / node<i>.pub
for i < N (each SuperNode's EC key pair in OpenSSH format: the private key stays on the node, the public key
is registered with the SuperLink by `flwr supernode register`). Existing files are kept."""
from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID = datetime.timedelta(days=365)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedlib"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def certificates(folder: Path, hosts: list[str]) -> None:
    if (folder / "server.pem").exists():
        return
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (x509.CertificateBuilder().subject_name(_name("fedlib CA")).issuer_name(_name("fedlib CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(now + VALID)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP384R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
              .public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now).not_valid_after(now + VALID)
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .sign(ca_key, hashes.SHA256()))
    _write(folder / "ca.key", _pem_key(ca_key), private=True)
    _write(folder / "ca.crt", ca.public_bytes(serialization.Encoding.PEM))
    _write(folder / "server.key", _pem_key(key), private=True)
    _write(folder / "server.pem", server.public_bytes(serialization.Encoding.PEM))


def node_keys(folder: Path, nodes: int) -> None:
    for i in range(nodes):
        if (folder / f"node{i}").exists():
            continue
        key = ec.generate_private_key(ec.SECP384R1())
        _write(folder / f"node{i}", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                     serialization.NoEncryption()), private=True)
        _write(folder / f"node{i}.pub", key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                                      serialization.PublicFormat.OpenSSH) + b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--nodes", type=int, default=2, help="SuperNode key pairs to make (default 2)")
    parser.add_argument("--host", action="append", help="the SuperLink's address (repeatable; default 127.0.0.1 "
                                                        "and localhost)")
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    certificates(args.folder, args.host or ["127.0.0.1", "localhost"])
    node_keys(args.folder, args.nodes)
    print(f"credentials in {args.folder}: ca.crt, server.pem/.key, node0..node{args.nodes - 1} (+ .pub)")


if __name__ == "__main__":
    main()
