//! TLS to the server, as `sslmode` in the source's URI says (rustls, no system library):
//!
//! - `disable`: plain TCP;
//! - `prefer` (the default, as libpq's): TLS if the server offers it, plain TCP otherwise, the
//!   certificate not checked;
//! - `require`: TLS or no connection, the certificate not checked (as libpq: encryption
//!   against eavesdropping, not against a server posing as the database);
//! - `verify-full`: TLS, the certificate checked against the system's roots, or only against
//!   the CA file `sslrootcert` names, and the host name checked against it.
//!
//! `verify-ca` (the chain checked but not the name) is refused: use `verify-full`.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;

use crate::error::{Error, Result};

/// What `sslmode` asks of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// No TLS at all (`disable`).
    Off,
    /// Encrypted, the certificate not checked (`prefer`, `require`).
    Encrypt,
    /// Encrypted, the certificate and the host name checked (`verify-full`).
    Verify,
}

/// The connection settings of a PostgreSQL source: tokio-postgres's, and what TLS checks.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: tokio_postgres::Config,
    pub check: Check,
    /// `sslrootcert`: the CA file `verify-full` trusts instead of the system's roots.
    pub root_cert: Option<String>,
}

/// Parse `uri`, taking `sslmode` and `sslrootcert` out of its query (tokio-postgres knows
/// neither `verify-full` nor `sslrootcert`).
pub fn parse(uri: &str) -> Result<Settings> {
    let invalid =
        |e: &dyn std::fmt::Display| Error::input(format!("invalid PostgreSQL URL `{uri}`: {e}"));
    let (mut mode, mut root_cert, mut rest) = ("prefer".to_string(), None, uri.to_string());
    if let Ok(mut url) = url::Url::parse(uri)
        && url.query().is_some()
    {
        let mut kept = Vec::new();
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                "sslmode" => mode = v.into_owned(),
                "sslrootcert" => root_cert = Some(v.into_owned()),
                _ => kept.push((k.into_owned(), v.into_owned())),
            }
        }
        url.set_query(None);
        if !kept.is_empty() {
            url.query_pairs_mut().extend_pairs(kept);
        }
        rest = url.to_string();
    }
    let (ssl, check) = match mode.as_str() {
        "disable" => (SslMode::Disable, Check::Off),
        "prefer" => (SslMode::Prefer, Check::Encrypt),
        "require" => (SslMode::Require, Check::Encrypt),
        "verify-full" => (SslMode::Require, Check::Verify),
        "verify-ca" => {
            return Err(invalid(
                &"sslmode=verify-ca (the chain checked, not the host name) is not supported: use verify-full",
            ));
        }
        other => {
            return Err(invalid(&format!(
                "sslmode `{other}`: expected disable, prefer, require or verify-full"
            )));
        }
    };
    if root_cert.is_some() && check != Check::Verify {
        return Err(invalid(
            &"sslrootcert is read only with sslmode=verify-full (the other modes check no certificate)",
        ));
    }
    let mut config: tokio_postgres::Config = rest.parse().map_err(|e| invalid(&e))?;
    config.ssl_mode(ssl);
    Ok(Settings {
        config,
        check,
        root_cert,
    })
}

/// The rustls client configuration for `s` (`None` for `disable`).
pub fn client_config(s: &Settings) -> Result<Option<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::runtime(format!("PostgreSQL TLS: {e}")))?;
    Ok(match s.check {
        Check::Off => None,
        Check::Encrypt => Some(
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked(
                    provider.signature_verification_algorithms,
                )))
                .with_no_client_auth(),
        ),
        Check::Verify => Some(
            builder
                .with_root_certificates(roots(s.root_cert.as_deref())?)
                .with_no_client_auth(),
        ),
    })
}

/// The CAs `verify-full` trusts: those of the file `sslrootcert`, or the system's.
fn roots(file: Option<&str>) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    match file {
        Some(path) => {
            let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect())
                .map_err(|e| Error::input(format!("PostgreSQL sslrootcert `{path}`: {e}")))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(Error::input(format!(
                    "PostgreSQL sslrootcert `{path}`: no certificate in it"
                )));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    Ok(roots)
}

/// `prefer` and `require`: the handshake's signatures are checked (the session is encrypted
/// with the key the server holds), the certificate is not.
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// Whether `e` (a connection failure) is the server's certificate refused: the user's
/// configuration (exit 2), not a failure a retry would get past.
pub fn certificate_refused(e: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(rustls::Error::InvalidCertificate(_)) =
                inner.downcast_ref::<rustls::Error>()
        {
            return true;
        }
        if let Some(rustls::Error::InvalidCertificate(_)) = s.downcast_ref::<rustls::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}
