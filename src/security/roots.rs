//! The system's CA certificates, for `tls=True` without a CA file.
//!
//! Linux (and every system but macOS): `rustls-native-certs`, which reads `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` when set, else the bundle and directory OpenSSL would use.
//!
//! macOS: `rustls-native-certs` would ask Security.framework for the keychain's trust settings,
//! and a wheel linking that framework could not be cross-built with zig (no Apple SDK) nor keep
//! its promise of linking nothing but libSystem (docs/packaging.md). So the same variables are
//! read here, and without them `/etc/ssl/cert.pem`, the PEM bundle of the system's roots that
//! macOS ships (LibreSSL's). A CA added only to the keychain is not seen: pass `tls_ca_file` or
//! set `SSL_CERT_FILE` (docs/binary-sasl-tls.md).
//!
//! Uses rustls's PEM reader only; certificates that do not parse are the caller's to skip.

use rustls::pki_types::CertificateDer;

/// The system's CA certificates (possibly none).
#[cfg(not(target_os = "macos"))]
pub(super) fn system() -> Vec<CertificateDer<'static>> {
    rustls_native_certs::load_native_certs().certs
}

/// The system's CA certificates (possibly none).
#[cfg(target_os = "macos")]
pub(super) fn system() -> Vec<CertificateDer<'static>> {
    let file = std::env::var_os("SSL_CERT_FILE");
    let dirs = std::env::var_os("SSL_CERT_DIR");
    from_env(file.as_deref(), dirs.as_deref())
}

/// The bundle macOS ships, read when neither variable is set.
#[cfg(any(test, target_os = "macos"))]
const MACOS_BUNDLE: &str = "/etc/ssl/cert.pem";

/// As `rustls-native-certs` reads them: `file` (a PEM bundle) and every file of each directory
/// in `dirs` (colon-separated), unreadable ones skipped; when neither is set, `MACOS_BUNDLE`.
#[cfg(any(test, target_os = "macos"))]
fn from_env(
    file: Option<&std::ffi::OsStr>,
    dirs: Option<&std::ffi::OsStr>,
) -> Vec<CertificateDer<'static>> {
    use std::path::Path;
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    match (file, dirs) {
        (None, None) => files.push(MACOS_BUNDLE.into()),
        _ => {
            files.extend(file.map(Into::into));
            for dir in dirs.iter().flat_map(std::env::split_paths) {
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    let mut found: Vec<_> = entries.flatten().map(|e| e.path()).collect();
                    found.sort();
                    files.extend(found);
                }
            }
        }
    }
    files
        .iter()
        .filter(|p| Path::is_file(p))
        .flat_map(|p| pem_certs(p))
        .collect()
}

/// The certificates of one PEM file; none when it cannot be read.
#[cfg(any(test, target_os = "macos"))]
fn pem_certs(path: &std::path::Path) -> Vec<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_file_iter(path)
        .map(|certs| certs.flatten().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// A PEM block of a few bytes: the reader decodes PEM, it does not parse X.509.
    fn pem(body: &str) -> String {
        format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n")
    }

    #[test]
    fn the_file_and_each_directory_are_read() {
        let tmp = std::env::temp_dir().join(format!("fastmc-roots-{}", std::process::id()));
        let dir = tmp.join("certs");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(tmp.join("bundle.pem"), pem("AAEC") + &pem("AwQF")).unwrap();
        std::fs::write(dir.join("a.0"), pem("BgcI")).unwrap();
        std::fs::write(dir.join("junk"), "not PEM").unwrap();
        let file = tmp.join("bundle.pem");
        let dirs = std::env::join_paths([dir.as_path(), &tmp.join("missing")]).unwrap();
        let got = from_env(Some(file.as_os_str()), Some(&dirs));
        let bytes: Vec<&[u8]> = got.iter().map(|c| c.as_ref()).collect();
        assert_eq!(bytes, [&[0u8, 1, 2][..], &[3, 4, 5], &[6, 7, 8]]);
        // The file alone; a missing file gives nothing (the caller says there is no CA).
        assert_eq!(from_env(Some(file.as_os_str()), None).len(), 2);
        assert!(from_env(Some(OsStr::new("/nonexistent/ca.pem")), None).is_empty());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn without_the_variables_the_bundle_macos_ships_is_read() {
        let got = from_env(None, None);
        let want = pem_certs(std::path::Path::new(MACOS_BUNDLE));
        assert_eq!(got, want);
    }
}
