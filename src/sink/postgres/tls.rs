//! TLS to PostgreSQL through rustls (the TLS of every other connection of
//! portion), as the URL's `sslmode` says: `require` encrypts without
//! checking the certificate (libpq's meaning: a server's self-signed one
//! is usual), `verify-ca` checks it against the system's roots,
//! `verify-full` its host name too. Apart from the connection because
//! the verifiers are their own small world.

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::postgres_url::PgTls;

/// The connector for `tls` (`prefer` and `disable` too: the client asks
/// for TLS only where `sslmode` lets it).
pub(super) fn connector(tls: PgTls, root_cert: Option<&Path>) -> Result<MakeRustlsConnect, String> {
    // (the process's provider where one is installed, else the one rustls
    // is built with here)
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let verifier: Arc<dyn ServerCertVerifier> = match tls {
        PgTls::Verify { host } => {
            let mut roots = RootCertStore::empty();
            let certs = match root_cert {
                Some(path) => CertificateDer::pem_file_iter(path)
                    .and_then(|c| c.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?,
                None => rustls_native_certs::load_native_certs().certs,
            };
            roots.add_parsable_certificates(certs);
            if roots.is_empty() {
                return Err("sslmode verify-ca/verify-full, but no root certificate to verify the server's against (the system's, or sslrootcert's)".into());
            }
            let webpki = WebPkiServerVerifier::builder(Arc::new(roots))
                .build()
                .map_err(|e| format!("the system's root certificates: {e}"))?;
            Arc::new(Verify { webpki, host })
        }
        _ => Arc::new(Unverified(provider.clone())),
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// `verify-ca` and `verify-full`: the chain to a root (and, `host`, the
/// name).
#[derive(Debug)]
struct Verify {
    webpki: Arc<WebPkiServerVerifier>,
    host: bool,
}

impl ServerCertVerifier for Verify {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match (self.webpki).verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            // (verify-ca: a certificate of another name is still the CA's)
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) if !self.host => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `require` (and `prefer`): encrypted, the certificate taken as it is,
/// its signatures over the handshake still checked.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
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
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
