//! Reading PEM: the certificates and the key in a text or a file, with errors that say
//! in words what is wrong with it (cut off, not base64, a key where a certificate was
//! expected, ...) and name the file.

use std::fs;
use std::path::Path;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::error::{Result, TlsError};

/// PEM text (or file contents) with what to call it in errors.
pub(super) struct Src<'a> {
    pub(super) label: String,
    pub(super) text: &'a [u8],
}

impl<'a> Src<'a> {
    pub(super) fn new(label: impl Into<String>, text: &'a [u8]) -> Self {
        Src {
            label: label.into(),
            text,
        }
    }

    fn contains(&self, needle: &[u8]) -> bool {
        self.text.windows(needle.len()).any(|w| w == needle)
    }

    fn has_pem_block(&self) -> bool {
        self.contains(b"-----BEGIN ")
    }

    /// A block of the wanted kind is there but did not decode.
    fn undecodable(&self, kind: &str) -> TlsError {
        TlsError::NotPem {
            file: self.label.clone(),
            detail: format!("a {kind} block is present but does not decode (corrupted base64?)"),
        }
    }

    fn not_pem(&self) -> TlsError {
        TlsError::NotPem {
            file: self.label.clone(),
            detail: "no PEM block (-----BEGIN ...-----) found; DER files are not accepted".into(),
        }
    }

    /// Every `CERTIFICATE` block, in order; at least one.
    pub(super) fn certs(&self) -> Result<Vec<CertificateDer<'static>>> {
        let mut certs = Vec::new();
        for item in CertificateDer::pem_slice_iter(self.text) {
            match item {
                Ok(c) => certs.push(c),
                Err(e) => {
                    return Err(TlsError::NotPem {
                        file: self.label.clone(),
                        detail: pem_problem(&e),
                    })
                }
            }
        }
        if certs.is_empty() {
            return Err(if self.contains(b"-----BEGIN CERTIFICATE-----") {
                self.undecodable("CERTIFICATE")
            } else if self.has_pem_block() {
                TlsError::NoCertificate {
                    file: self.label.clone(),
                }
            } else {
                self.not_pem()
            });
        }
        Ok(certs)
    }

    /// The first private key block.
    pub(super) fn key(&self) -> Result<PrivateKeyDer<'static>> {
        match PrivateKeyDer::from_pem_slice(self.text) {
            Ok(k) => Ok(k),
            Err(pem::Error::NoItemsFound) if self.contains(b"PRIVATE KEY-----") => {
                Err(self.undecodable("PRIVATE KEY"))
            }
            Err(pem::Error::NoItemsFound) if self.has_pem_block() => Err(TlsError::NoPrivateKey {
                file: self.label.clone(),
            }),
            Err(pem::Error::NoItemsFound) => Err(self.not_pem()),
            Err(e) => Err(TlsError::NotPem {
                file: self.label.clone(),
                detail: pem_problem(&e),
            }),
        }
    }
}

/// What the PEM parser found wrong, in words (its own messages print byte lists, such as
/// `missing section end marker: [67, 69, 82, ...]`).
fn pem_problem(e: &pem::Error) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    match e {
        pem::Error::MissingSectionEnd { end_marker } => {
            let label = text(end_marker);
            format!(
                "the {label} block has no \"-----END {label}-----\" line: the file is cut \
                 off (an incomplete copy, or a full disk when it was written)"
            )
        }
        pem::Error::IllegalSectionStart { line } => {
            format!("malformed BEGIN line {:?}", text(line))
        }
        pem::Error::Base64Decode(detail) => {
            format!("the text between the BEGIN and END lines is not valid base64 ({detail})")
        }
        pem::Error::SectionTooLarge => "a block is larger than 256 MB".into(),
        pem::Error::NoItemsFound => "no PEM block (-----BEGIN ...-----) found".into(),
        other => other.to_string(),
    }
}

/// A file read whole, labelled by its path for error messages.
pub(super) struct ReadFile {
    label: String,
    text: Vec<u8>,
}

impl ReadFile {
    pub(super) fn src(&self) -> Src<'_> {
        Src::new(self.label.clone(), &self.text)
    }

    /// The file's contents.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.text
    }
}

/// Reads the PEM files of an identity: CA, certificate, key.
pub(super) fn read_files([ca, cert, key]: [&Path; 3]) -> Result<[ReadFile; 3]> {
    let read = |p: &Path| -> Result<ReadFile> {
        Ok(ReadFile {
            label: p.display().to_string(),
            text: read_file(p)?,
        })
    };
    Ok([read(ca)?, read(cert)?, read(key)?])
}

pub(super) fn read_file(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::*;

    #[test]
    fn a_cut_off_pem_file_is_named_and_described_in_words() {
        let dir = tempfile::tempdir().unwrap();
        write_cluster_certs(dir.path(), [1]).unwrap();
        for name in [
            node_cert_file(1),
            node_key_file(1),
            CA_CERT_FILE.to_string(),
        ] {
            let path = dir.path().join(&name);
            let full = fs::read_to_string(&path).unwrap();
            // Cut off after the first two lines (BEGIN and some base64): no END line.
            let cut: String = full.lines().take(2).map(|l| format!("{l}\n")).collect();
            fs::write(&path, &cut).unwrap();
            let e = TlsIdentity::from_dir(dir.path(), 1)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&path.display().to_string()), "{e}");
            assert!(
                e.contains("has no \"-----END") && e.contains("cut off"),
                "{e}"
            );
            assert!(
                !e.contains("[45, ") && !e.contains("[67, "),
                "bytes, not words: {e}"
            );
            fs::write(&path, &full).unwrap();
        }
        TlsIdentity::from_dir(dir.path(), 1).unwrap();
    }
}
