//! `ringload serve` over TLS: a certificate and key from PEM files (`--tls-cert`,
//! `--tls-key`), or a fresh CA and a certificate it signs for the listen address
//! (`--tls-self-signed`, made with rcgen), whose CA PEM clients trust with `--ca-bundle`.
//!
//! rustls on the `ring` provider, as the client (`s3::tls`); TLS 1.3 and 1.2, ALPN
//! `http/1.1`, a session cache so reconnecting clients resume.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Sessions a server remembers for resumption.
const SESSION_CACHE: usize = 4096;

/// A server configuration from PEM files; the error names the file and what it should hold.
pub fn from_files(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|c| c.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            format!(
                "--tls-cert {}: cannot read a PEM certificate chain ({e}); name the server's \
                 certificate (and its intermediates) in PEM",
                cert.display()
            )
        })?;
    if certs.is_empty() {
        return Err(format!(
            "--tls-cert {}: holds no PEM certificate; name the server's certificate in PEM",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "--tls-key {}: cannot read a PEM private key ({e}); name the certificate's key in \
             PEM (PKCS#8, PKCS#1 or SEC1)",
            key.display()
        )
    })?;
    config(certs, key)
}

/// The files `--tls-self-signed` wrote: the CA clients trust, and the server's own pair.
#[derive(Debug, Clone)]
pub struct SelfSigned {
    pub ca_pem: PathBuf,
    pub cert_pem: PathBuf,
    pub key_pem: PathBuf,
}

/// Makes a CA and a certificate it signs for `listen` (its IP, `localhost`, `*.localhost` for
/// virtual-hosted buckets, and this host's name), writes them into `dir`, and returns the
/// server configuration with the files' paths.
pub fn self_signed(
    listen: SocketAddr,
    dir: &Path,
) -> Result<(Arc<ServerConfig>, SelfSigned), String> {
    let failed = |what: &str, e: rcgen::Error| format!("cannot make the {what}: {e}");
    let ca_key = KeyPair::generate().map_err(|e| failed("CA key", e))?;
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "ringload serve CA");
    let ca = ca_params
        .self_signed(&ca_key)
        .map_err(|e| failed("CA certificate", e))?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let mut names = vec!["localhost".to_string(), "*.localhost".to_string()];
    if let Ok(host) = rustix::system::uname().nodename().to_str()
        && !host.is_empty()
    {
        names.push(host.to_string());
        names.push(format!("*.{host}"));
    }
    let mut params = CertificateParams::new(names).map_err(|e| failed("server certificate", e))?;
    let ips: Vec<IpAddr> = if listen.ip().is_unspecified() {
        vec![
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ]
    } else {
        vec![listen.ip()]
    };
    params
        .subject_alt_names
        .extend(ips.into_iter().map(SanType::IpAddress));
    params
        .distinguished_name
        .push(DnType::CommonName, "ringload serve");
    let key = KeyPair::generate().map_err(|e| failed("server key", e))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| failed("server certificate", e))?;

    // A folder made here is its owner's alone (0700); one already there is left as it is.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let files = SelfSigned {
        ca_pem: dir.join("ca.pem"),
        cert_pem: dir.join("cert.pem"),
        key_pem: dir.join("key.pem"),
    };
    // The certificates are public; the key is not (0600).
    for (path, text) in [(&files.ca_pem, ca.pem()), (&files.cert_pem, cert.pem())] {
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    write_private(&files.key_pem, &key.serialize_pem())?;
    let chain = vec![cert.der().clone()];
    let key_der = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| format!("cannot use the server key: {e}"))?;
    Ok((config(chain, key_der)?, files))
}

/// The folder `--tls-self-signed` writes into when given none: a new one in the temporary
/// directory, as `mkdtemp(3)` makes them — a random name, created (never reused: `mkdir`
/// fails on anything already there, a planted link included) with mode 0700.
pub fn private_temp_dir() -> Result<PathBuf, String> {
    use ring::rand::SecureRandom;
    let random = ring::rand::SystemRandom::new();
    let base = std::env::temp_dir();
    let mut last_error = None;
    for _ in 0..16 {
        let mut name = [0u8; 12];
        random
            .fill(&mut name)
            .map_err(|_| "cannot draw a random folder name".to_string())?;
        let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
        let dir = base.join(format!("ringload-serve-tls-{hex}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
    }
    Err(format!(
        "cannot create a new folder in {} ({}); name one: --tls-self-signed DIR",
        base.display(),
        last_error.map_or_else(String::new, |e| e.to_string())
    ))
}

/// Writes `text` to `path` readable and writable by its owner alone (0600), whatever the
/// umask: a file already there is removed first, so neither its mode nor a link planted in its
/// place is kept.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(failed(e)),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)
}

fn config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!("the TLS certificate and key do not go together ({e}); check --tls-key")
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE);
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    /// The default folder is private and unpredictable, and the key readable by its owner only,
    /// whatever the umask; also in a folder the user names, over an older key.
    #[test]
    fn the_key_and_the_default_folder_are_private() {
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = private_temp_dir().unwrap();
        let b = private_temp_dir().unwrap();
        let cleanup = [a.clone(), b.clone()];
        assert_ne!(a, b, "two folders of one process share a name");
        assert!(
            !a.to_string_lossy()
                .contains(&std::process::id().to_string())
        );
        assert_eq!(mode(&a), 0o700, "{}", a.display());
        let (_, files) = self_signed(listen, &a).unwrap();
        assert_eq!(mode(&files.key_pem), 0o600);

        let named = tempfile::tempdir().unwrap();
        let dir = named.path().join("tls");
        std::fs::create_dir(&dir).unwrap();
        let old_key = dir.join("key.pem");
        std::fs::write(&old_key, "old").unwrap();
        std::fs::set_permissions(&old_key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (_, files) = self_signed(listen, &dir).unwrap();
        assert_eq!(mode(&files.key_pem), 0o600);
        assert!(
            std::fs::read_to_string(&files.key_pem)
                .unwrap()
                .contains("PRIVATE KEY")
        );
        // The certificates are public.
        assert_eq!(mode(&files.ca_pem) & 0o600, 0o600);
        for dir in cleanup {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
