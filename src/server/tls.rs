//! `ringload serve` over TLS: a certificate and key from PEM files (`--tls-cert`,
//! `--tls-key`), or a fresh CA and a certificate it signs for the listen address
//! (`--tls-self-signed`, made with rcgen), whose CA PEM clients trust with `--ca-bundle`.
//!
//! rustls on the `ring` provider, as the client (`s3::tls`); TLS 1.3 and 1.2, ALPN
//! `http/1.1`, a session cache so reconnecting clients resume.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
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

    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let files = SelfSigned {
        ca_pem: dir.join("ca.pem"),
        cert_pem: dir.join("cert.pem"),
        key_pem: dir.join("key.pem"),
    };
    for (path, text) in [
        (&files.ca_pem, ca.pem()),
        (&files.cert_pem, cert.pem()),
        (&files.key_pem, key.serialize_pem()),
    ] {
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let chain = vec![cert.der().clone()];
    let key_der = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| format!("cannot use the server key: {e}"))?;
    Ok((config(chain, key_der)?, files))
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
