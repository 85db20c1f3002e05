//! TLS for the `rediss…://` forms: rustls with the `ring` provider, passed to each
//! configuration (so no process-wide provider needs installing), verifying servers against
//! the system's roots or a private CA.

use std::sync::{Arc, OnceLock};

use redis::{ErrorKind, RedisError, RedisResult};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::ConfigError;

/// Whom a backend's TLS connections trust: the system's roots by default.
#[derive(Clone, Default)]
pub(super) struct Tls {
    /// A private CA's configuration; `None`: the system's roots.
    private_ca: Option<Arc<ClientConfig>>,
}

impl Tls {
    /// Trusting the CA certificates in `pem` instead of the system's roots.
    pub fn trusting(pem: &[u8]) -> Result<Tls, ConfigError> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert =
                cert.map_err(|e| ConfigError::new(format!("the TLS CA is not readable PEM: {e}")))?;
            roots.add(cert).map_err(|e| {
                ConfigError::new(format!("the TLS CA holds an unusable certificate: {e}"))
            })?;
        }
        if roots.is_empty() {
            return Err(ConfigError::new(
                "the TLS CA holds no certificate; pass PEM text with at least one \
                 `-----BEGIN CERTIFICATE-----` block",
            ));
        }
        Ok(Tls {
            private_ca: Some(config(roots)),
        })
    }

    /// Whether a private CA is trusted instead of the system's roots.
    pub fn has_private_ca(&self) -> bool {
        self.private_ca.is_some()
    }

    /// Opens TLS over `tcp` to `host`, verifying its certificate.
    pub async fn handshake(&self, host: &str, tcp: TcpStream) -> RedisResult<TlsStream<TcpStream>> {
        let config = match &self.private_ca {
            Some(config) => config.clone(),
            None => system_roots().await?,
        };
        let name = ServerName::try_from(host.to_owned()).map_err(|_| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "the Redis host is not a valid TLS server name",
                host.to_owned(),
            ))
        })?;
        TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(
                |e| match e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                    // Trying again cannot help: say what to change.
                    Some(rustls::Error::InvalidCertificate(why)) => RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "the Redis server's TLS certificate is not trusted; for a private CA pass \
                     it with `Limiter::with_tls_ca`",
                        format!("{host}: {why:?}"),
                    )),
                    _ => e.into(),
                },
            )
    }
}

/// The system's roots, read once, off the runtime's threads: reading and parsing the
/// system's store can take longer than a check may.
async fn system_roots() -> RedisResult<Arc<ClientConfig>> {
    static SYSTEM: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    let config = match SYSTEM.get() {
        Some(config) => config.clone(),
        // Kept once read, also when the connect that waits for it gives up.
        None => tokio::task::spawn_blocking(|| SYSTEM.get_or_init(read_system_roots).clone())
            .await
            .unwrap_or_else(|e| Err(format!("reading them stopped: {e}"))),
    };
    config.map_err(|why| {
        RedisError::from((
            ErrorKind::InvalidClientConfig,
            "cannot verify the Redis server's TLS certificate",
            why,
        ))
    })
}

fn read_system_roots() -> Result<Arc<ClientConfig>, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(format!(
            "no trusted root certificates found ({}); install the system's CA bundle \
             (Debian: ca-certificates) or pass the CA with `Limiter::with_tls_ca`",
            errors.join("; ")
        ));
    }
    Ok(config(roots))
}

fn config(roots: RootCertStore) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports rustls's default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}
