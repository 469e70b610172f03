//! Connection security settings: SASL PLAIN credentials (pylibmc's `username`/`password`) and the
//! TLS client configuration (a fastmc extension, with rustls and its pure-Rust `ring` provider).
//! Loading certificates and keys happens once, when the client is built, so a bad file fails at
//! construction and connecting never reads files. Depends on `error` only (and rustls).

mod roots;

use std::fmt;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// SASL PLAIN credentials, sent on every new connection before anything else.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: Vec<u8>,
    pub password: Vec<u8>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the password.
        f.debug_struct("Credentials")
            .field("username", &String::from_utf8_lossy(&self.username))
            .finish_non_exhaustive()
    }
}

/// What the user asked for: each `None` takes the default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file of CA certificates to trust; `None`: the system's store.
    pub ca_file: Option<String>,
    /// PEM client certificate chain and its private key, for servers that verify clients.
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    /// The name the server certificate must carry (and SNI); `None`: the server's host.
    pub server_name: Option<String>,
}

/// A ready TLS client configuration, shared by every connection of a client.
#[derive(Clone)]
pub struct Tls {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
    pub options: TlsOptions,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn load_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| format!("{path}: {e}"))?;
    let certs = iter
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{path}: no PEM certificate found"));
    }
    Ok(certs)
}

impl Tls {
    /// Build the configuration: a setup error is a message for the user.
    pub fn new(options: TlsOptions) -> Result<Tls, String> {
        let mut roots = RootCertStore::empty();
        match &options.ca_file {
            Some(path) => {
                for c in load_certs(path)? {
                    roots
                        .add(c)
                        .map_err(|e| format!("{path}: bad CA certificate: {e}"))?;
                }
            }
            None => {
                // Certificates the platform store holds that rustls cannot parse are skipped.
                let (added, _) = roots.add_parsable_certificates(roots::system());
                if added == 0 {
                    return Err(
                        "no CA certificates found in the system store; pass a CA file".into(),
                    );
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .with_root_certificates(roots);
        let config = match (&options.cert_file, &options.key_file) {
            (Some(cert), Some(key)) => {
                let chain = load_certs(cert)?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{key}: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("TLS client certificate: {e}"))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err("a TLS client certificate needs both a cert file and a key file".into())
            }
        };
        let server_name = match &options.server_name {
            Some(n) => Some(
                ServerName::try_from(n.clone())
                    .map_err(|e| format!("bad TLS server name {n:?}: {e}"))?,
            ),
            None => None,
        };
        Ok(Tls {
            config: Arc::new(config),
            server_name,
            options,
        })
    }

    pub fn config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// The name to verify for a server reached at `host` (an IP address or a DNS name).
    pub fn server_name_for(&self, host: &str) -> Result<ServerName<'static>, String> {
        if let Some(n) = &self.server_name {
            return Ok(n.clone());
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_string())
            .map_err(|e| format!("bad TLS server name {host:?}: {e}"))
    }
}

/// Everything a new connection does before it carries requests.
#[derive(Clone, Debug, Default)]
pub struct Security {
    pub sasl: Option<Credentials>,
    pub tls: Option<Tls>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_never_printed() {
        let c = Credentials {
            username: b"alice".to_vec(),
            password: b"hunter2".to_vec(),
        };
        let s = format!("{c:?}");
        assert!(s.contains("alice") && !s.contains("hunter2"), "{s}");
    }

    #[test]
    fn bad_files_are_reported() {
        let e = Tls::new(TlsOptions {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        })
        .err()
        .unwrap_or_default();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
        let e = Tls::new(TlsOptions {
            ca_file: Some("Cargo.toml".into()),
            ..TlsOptions::default()
        })
        .err()
        .unwrap_or_default();
        assert!(e.contains("no PEM certificate"), "{e}");
    }
}
