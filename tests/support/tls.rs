//! A `redis-server` that speaks TLS, with a certificate from a CA the test makes itself, so
//! that `rediss://` is tested against real certificate verification.

use super::{connect, retry_on_taken_ports, PortReservation, PortTaken, RedisProcess, ScratchDir};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use std::path::Path;

/// A `redis-server` with a TLS port and a plain one; killed on drop, its files removed.
pub struct TlsRedisServer {
    _process: RedisProcess,
    tls_port: u16,
    plain_port: u16,
    ca_pem: String,
    _dir: ScratchDir,
    _ports: Vec<PortReservation>,
}

impl TlsRedisServer {
    /// A redis-server with a TLS port (server cert signed by a throwaway CA made by the
    /// test, SANs 127.0.0.1 and localhost, `--tls-auth-clients no`) and a plain port for
    /// inspection.
    pub fn start() -> TlsRedisServer {
        retry_on_taken_ports(TlsRedisServer::try_start)
    }

    fn try_start() -> Result<TlsRedisServer, PortTaken> {
        let (reserved, ports) = PortReservation::many(2, 0);
        let (tls_port, plain_port) = (ports[0], ports[1]);
        let dir = ScratchDir::new(&format!("tls-{tls_port}"));
        let ca_pem = write_certificates(&dir);
        let file = |name: &str| {
            let path = dir.join(name);
            path.to_str()
                .expect("the temp dir path is UTF-8")
                .to_owned()
        };
        let tls_args = [
            ("--tls-port", tls_port.to_string()),
            ("--tls-cert-file", file("server.crt")),
            ("--tls-key-file", file("server.key")),
            ("--tls-ca-cert-file", file("ca.crt")),
            ("--tls-auth-clients", "no".to_owned()),
        ];
        let tls_args: Vec<&str> = tls_args.iter().flat_map(|(k, v)| [*k, v]).collect();
        let mut process = RedisProcess::spawn_node(plain_port, &dir, &tls_args);
        process.wait_until_ready()?;
        Ok(TlsRedisServer {
            _process: process,
            tls_port,
            plain_port,
            ca_pem,
            _dir: dir,
            _ports: reserved,
        })
    }

    /// `rediss://127.0.0.1:<tls_port>/`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }

    /// `redis://127.0.0.1:<plain_port>/`: the same server without TLS.
    pub fn plain_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.plain_port)
    }

    /// The CA certificate (PEM) that signed the server's: what a client must trust.
    pub fn ca_pem(&self) -> Vec<u8> {
        self.ca_pem.clone().into_bytes()
    }

    /// A plain synchronous connection over the plain port, for inspecting the server.
    pub fn connection(&self) -> redis::Connection {
        connect(self.plain_port)
    }
}

/// Makes a CA and a server certificate signed by it for 127.0.0.1 and localhost, writes
/// `ca.crt`, `server.crt` and `server.key` into `dir`, and returns the CA's PEM.
pub(super) fn write_certificates(dir: &Path) -> String {
    let generate = || KeyPair::generate().expect("generate a key pair");
    let mut ca_params = CertificateParams::new(Vec::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "redis-ratelimit test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, generate()).expect("self-sign the CA");
    let server_key = generate();
    let server_names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let server = CertificateParams::new(server_names)
        .and_then(|params| params.signed_by(&server_key, &ca))
        .expect("sign the server certificate");
    for (name, pem) in [
        ("ca.crt", ca.pem()),
        ("server.crt", server.pem()),
        ("server.key", server_key.serialize_pem()),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
    ca.pem()
}
