//! TLS for both engines, with rustls 0.23 on the `ring` provider.
//!
//! **Why `ring`**: it builds with nothing but a C compiler (its AES-GCM and SHA are assembly
//! with AES-NI, PCLMULQDQ and AVX where the CPU has them), where `aws-lc-rs`, rustls's default,
//! builds a large C library whose build wants CMake on some hosts and adds minutes to a 2-core
//! CI build. Both negotiate the same suites here (TLS 1.3 AES-GCM first).
//!
//! - **Trust**: the PEM file named by `--ca-bundle`, `AWS_CA_BUNDLE` or the profile's
//!   `ca_bundle`, alone, as the AWS CLI uses it (it replaces the system's roots); without one,
//!   the system's roots (`rustls-native-certs`: `SSL_CERT_FILE`/`SSL_CERT_DIR`, else the
//!   distribution's bundle). The name checked is the one the request names (the endpoint's
//!   host, `bucket.host` virtual-hosted; an IP address against the certificate's IP SANs).
//!   `--insecure` checks nothing, and the report and summary say so.
//! - **Resumption**: one [`ClientConfig`] per run, so every connection shares its session
//!   cache; a reconnect after a failure resumes (TLS 1.3 tickets) instead of a full handshake.
//! - **Failures**: [`describe`] turns a handshake error into one line naming the cause and the
//!   flag that fixes it; [`speaks_tls`] tells a TLS server met at an `http://` URL.
//! - **kTLS**: [`ktls_available`] reads `tcp_available_ulp`. No kTLS path is built: this kernel
//!   has none to test it on. Its seam is the io_uring engine's TLS connection
//!   (`engine/uring/tls/mod.rs`), where, after the handshake, rustls's
//!   `dangerous_into_kernel_connection` would hand the keys to the socket (`setsockopt
//!   SOL_TLS`) and `READ_FIXED` would land plaintext directly.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::target::{Endpoint, TlsOptions};

/// The client configuration every TLS connection of a process uses. The error names the CA
/// file and says what to do.
pub fn client_config(options: &TlsOptions) -> Result<Arc<ClientConfig>, String> {
    client_config_with(options, || rustls_native_certs::load_native_certs().certs)
}

/// [`client_config`] with the system's roots from `native` (a test hands in its own).
fn client_config_with(
    options: &TlsOptions,
    native: impl FnOnce() -> Vec<CertificateDer<'static>>,
) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    let mut config = if options.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(root_store(options, native)?)
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The roots a connection trusts: the CA bundle's certificates alone when one is given, else
/// the system's (`native`). As the AWS CLI and SDKs do: a bundle replaces the default roots,
/// so a user who narrows trust to a private CA does not go on trusting every public one.
fn root_store(
    options: &TlsOptions,
    native: impl FnOnce() -> Vec<CertificateDer<'static>>,
) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let Some(path) = &options.ca_bundle else {
        roots.add_parsable_certificates(native());
        return Ok(roots);
    };
    let from = options.ca_bundle_from.as_deref().unwrap_or("--ca-bundle");
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            format!(
                "{from} {}: cannot read CA certificates ({e}); name a PEM file of CA \
                 certificates",
                path.display()
            )
        })?;
    if certs.is_empty() {
        return Err(format!(
            "{from} {}: holds no PEM certificate; name a PEM file of CA certificates",
            path.display()
        ));
    }
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "{from} {}: no certificate in it could be parsed; name a PEM file of CA \
             certificates",
            path.display()
        ));
    }
    Ok(roots)
}

/// The name TLS checks for `hostname` (a DNS name, or an IP address in `[brackets]` or not).
pub fn server_name(hostname: &str) -> Result<ServerName<'static>, String> {
    let bare = hostname.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string())
        .map_err(|_| format!("'{hostname}' is not a name TLS can check"))
}

/// One line for a failed TLS handshake with `endpoint`: the cause and the flag that fixes it;
/// with a CA bundle in `trust`, the file it was checked against and who named it.
pub fn describe(
    error: &std::io::Error,
    endpoint: &Endpoint,
    hostname: &str,
    trust: &TlsOptions,
) -> String {
    let tls = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    use rustls::CertificateError as C;
    match tls {
        Some(rustls::Error::InvalidCertificate(cert)) => match cert {
            // Another CA of the same name fails its signature rather than its issuer.
            C::UnknownIssuer | C::BadSignature if trust.ca_bundle.is_some() => format!(
                "the TLS certificate of {endpoint} is not signed by a CA in {} (named by {}), \
                 the only CAs trusted (a bundle replaces the system's roots); put the server's \
                 CA in that file or name the right one, or --insecure to skip the check",
                trust
                    .ca_bundle
                    .as_deref()
                    .unwrap_or(std::path::Path::new(""))
                    .display(),
                trust.ca_bundle_from.as_deref().unwrap_or("--ca-bundle")
            ),
            C::UnknownIssuer => format!(
                "the TLS certificate of {endpoint} is signed by a CA this machine does not \
                 trust; pass --ca-bundle FILE (or AWS_CA_BUNDLE) with the CA's PEM (a bundle \
                 replaces the system's roots, so it must hold every CA to trust), or \
                 --insecure to skip the check"
            ),
            C::NotValidForName | C::NotValidForNameContext { .. } => format!(
                "the TLS certificate of {endpoint} is not valid for the name '{hostname}'; \
                 connect by a name the certificate lists (--resolve NAME:PORT:ADDR pins a name \
                 to an address), or --insecure to skip the check"
            ),
            C::Expired | C::ExpiredContext { .. } => format!(
                "the TLS certificate of {endpoint} has expired; renew it on the server, or \
                 --insecure to skip the check"
            ),
            C::NotValidYet | C::NotValidYetContext { .. } => format!(
                "the TLS certificate of {endpoint} is not valid yet (check both clocks); or \
                 --insecure to skip the check"
            ),
            other => format!(
                "the TLS certificate of {endpoint} was refused ({other:?}); pass --ca-bundle \
                 FILE with the right CA, or --insecure to skip the check"
            ),
        },
        Some(rustls::Error::InvalidMessage(_))
        | Some(rustls::Error::InappropriateMessage { .. }) => {
            format!("{endpoint} did not answer in TLS (a plain-HTTP server?); use http:// for it")
        }
        Some(other) => format!("the TLS handshake with {endpoint} failed: {other}"),
        None if error.kind() == std::io::ErrorKind::UnexpectedEof => format!(
            "{endpoint} closed the connection during the TLS handshake (a plain-HTTP server?); \
             use http:// for a plain-HTTP server"
        ),
        None => format!("the TLS handshake with {endpoint} failed: {error}"),
    }
}

/// Whether the server at `addr` answers a TLS ClientHello with a TLS record: run when a request
/// to an `http://` endpoint fails, to say "use https://".
pub fn speaks_tls(addr: SocketAddr, hostname: &str, timeout: Duration) -> bool {
    let Ok(name) = server_name(hostname) else {
        return false;
    };
    let config = match client_config(&TlsOptions {
        insecure: true,
        ..TlsOptions::default()
    }) {
        Ok(c) => c,
        Err(_) => return false,
    };
    let Ok(mut conn) = rustls::ClientConnection::new(config, name) else {
        return false;
    };
    let mut hello = Vec::new();
    if conn.write_tls(&mut hello).is_err() {
        return false;
    }
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    if stream.write_all(&hello).is_err() {
        return false;
    }
    let mut head = [0u8; 3];
    // A handshake (22) or alert (21) record of TLS 1.x (3, x).
    stream.read_exact(&mut head).is_ok() && matches!(head, [21 | 22, 3, 0..=4])
}

/// Whether the kernel offers kTLS: `tls` in `/proc/sys/net/ipv4/tcp_available_ulp`.
pub fn ktls_available() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|ulps| ulps.split_whitespace().any(|u| u == "tls"))
}

/// `--insecure`: every certificate accepted; signatures still checked with the provider, so
/// the handshake itself stays sound.
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

    /// A CA named `name`, and a certificate for `localhost` it signs (with that key).
    struct Ca {
        cert: rcgen::Certificate,
        server_chain: Vec<CertificateDer<'static>>,
        server_key: Vec<u8>,
    }

    fn ca(name: &str) -> Ca {
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(params, ca_key);
        let key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        Ca {
            cert,
            server_chain: vec![server.der().clone()],
            server_key: key.serialize_der(),
        }
    }

    fn subjects(roots: &RootCertStore) -> Vec<String> {
        roots
            .roots
            .iter()
            .map(|r| String::from_utf8_lossy(r.subject.as_ref()).into_owned())
            .collect()
    }

    /// Runs a TLS handshake in memory between a client with `config` and a server presenting
    /// `ca`'s certificate for localhost; the client's error, if any.
    fn handshake(config: Arc<ClientConfig>, ca: &Ca) -> Result<(), rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server_config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                ca.server_chain.clone(),
                rustls::pki_types::PrivateKeyDer::try_from(ca.server_key.clone()).unwrap(),
            )
            .unwrap();
        let mut server = rustls::ServerConnection::new(Arc::new(server_config)).unwrap();
        let mut client =
            rustls::ClientConnection::new(config, server_name("localhost").unwrap()).unwrap();
        for _ in 0..20 {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut wire.as_slice()).unwrap();
            // The server's refusal of our alert is not what is tested.
            let _ = server.process_new_packets();
            let mut wire = Vec::new();
            server.write_tls(&mut wire).unwrap();
            client.read_tls(&mut wire.as_slice()).unwrap();
            client.process_new_packets()?;
            if !client.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the in-memory handshake did not finish");
    }

    /// As the AWS CLI: a CA bundle replaces the system's roots; without one, the system's are
    /// trusted. A server whose certificate chains to a system CA is refused once a bundle of
    /// another CA is given.
    #[test]
    fn a_ca_bundle_replaces_the_system_roots() {
        let system = ca("a system CA");
        let private = ca("the bundle's CA");
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("ca.pem");
        std::fs::write(&bundle, private.cert.pem()).unwrap();
        let native = || vec![system.cert.der().clone()];
        let with_bundle = TlsOptions {
            ca_bundle: Some(bundle),
            ca_bundle_from: Some("AWS_CA_BUNDLE".into()),
            ..TlsOptions::default()
        };

        let roots = root_store(&with_bundle, native).unwrap();
        assert_eq!(roots.len(), 1, "{:?}", subjects(&roots));
        assert!(subjects(&roots)[0].contains("the bundle's CA"));
        let roots = root_store(&TlsOptions::default(), native).unwrap();
        assert_eq!(roots.len(), 1, "{:?}", subjects(&roots));
        assert!(subjects(&roots)[0].contains("a system CA"));

        let config = client_config_with(&with_bundle, native).unwrap();
        assert_eq!(handshake(config.clone(), &private), Ok(()));
        assert!(
            matches!(
                handshake(config, &system),
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::UnknownIssuer
                ))
            ),
            "a server of a system CA was trusted beside the bundle"
        );
        let config = client_config_with(&TlsOptions::default(), native).unwrap();
        assert_eq!(handshake(config, &system), Ok(()));
    }
}
