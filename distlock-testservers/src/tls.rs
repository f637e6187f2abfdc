//! Certificates for the TLS servers: a test CA, a server certificate for `127.0.0.1`
//! and `localhost` signed by it, a client certificate (for servers that ask for one),
//! and a second CA that signed nothing, for the wrong-CA case. Made fresh by
//! [`TlsMaterial::generate`]; the clients' copies are PEM files in a folder of their
//! own, removed on drop.

use std::path::{Path, PathBuf};

use distlock_core::BoxError;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// Where the container finds its files (its own CA, certificate and key, and the
/// client's, for the server's own client inside the container).
pub(crate) const IN_CONTAINER: &str = "/tls";

/// A test CA and what it signed.
#[derive(Debug)]
pub struct TlsMaterial {
    dir: PathBuf,
    /// The files the container gets, as (name, contents).
    pub(crate) container_files: Vec<(&'static str, String)>,
}

impl TlsMaterial {
    /// A fresh CA, server and client certificates, and an unrelated CA.
    pub fn generate() -> Result<Self, BoxError> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "distlock test CA");
        let ca = ca_params.self_signed(&ca_key)?;

        let leaf = |names: Vec<String>, cn: &str| -> Result<(String, String), BoxError> {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(names)?;
            params.distinguished_name.push(DnType::CommonName, cn);
            let cert = params.signed_by(&key, &ca, &ca_key)?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "distlock test server",
        )?;
        let (client_cert, client_key) = leaf(Vec::new(), "distlock test client")?;

        let other_key = KeyPair::generate()?;
        let mut other = CertificateParams::new(Vec::new())?;
        other.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        other
            .distinguished_name
            .push(DnType::CommonName, "a CA that signed nothing here");
        let wrong_ca = other.self_signed(&other_key)?;

        let dir = std::env::temp_dir().join(format!("distlock-tls-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir)?;
        let files = [
            ("ca.pem", ca.pem()),
            ("client.pem", client_cert.clone()),
            ("client.key", client_key.clone()),
            ("wrong-ca.pem", wrong_ca.pem()),
        ];
        for (name, contents) in &files {
            std::fs::write(dir.join(name), contents)?;
        }
        Ok(TlsMaterial {
            dir,
            container_files: vec![
                ("ca.pem", ca.pem()),
                ("server.pem", server_cert),
                ("server.key", server_key),
                ("client.pem", client_cert),
                ("client.key", client_key),
            ],
        })
    }

    /// The CA that signed the server's certificate (PEM file).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A client certificate the CA signed (PEM file).
    pub fn client_cert_file(&self) -> PathBuf {
        self.dir.join("client.pem")
    }

    /// The client certificate's key (PEM file).
    pub fn client_key_file(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// A CA that signed nothing here (PEM file): trusting it alone, a client must
    /// refuse the server.
    pub fn wrong_ca_file(&self) -> PathBuf {
        self.dir.join("wrong-ca.pem")
    }

    /// The folder of the clients' files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TlsMaterial {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
