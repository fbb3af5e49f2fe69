//! Reloading a node's identity while it runs: [`TlsFiles`] says where the CA bundle,
//! the certificate and the key are; a [`FileSnapshot`] is their bytes at one moment
//! (compared to tell that they changed) and checks them into a [`TlsIdentity`];
//! [`TlsReload`] says what a reload did.
//!
//! The checks are those of a start (PEM, a node certificate, the key belongs to it, it
//! verifies under the bundle as client and server) and one more: the certificate names
//! the node the files are for. The transport swaps its credential only once all of them
//! passed (`docs/design.md`, section 6, "Rotating certificates").

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::NodeId;

use super::credential::Holder;
use super::error::{Result, TlsError};
use super::files::{key_file_warnings, node_cert_file, node_key_file, CA_CERT_FILE};
use super::identity::TlsIdentity;
use super::pem::{read_files, ReadFile};

/// Where node `id`'s identity files are: what it loaded at start and reloads from
/// while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA bundle: one CA certificate, or two while the group moves to a new CA
    /// (every CA in it is trusted).
    pub ca: PathBuf,
    /// The node's certificate chain.
    pub cert: PathBuf,
    /// The node's private key.
    pub key: PathBuf,
    /// The node the certificate must name.
    pub id: NodeId,
}

impl TlsFiles {
    /// Node `id`'s files in a folder of the layout the `certs` example writes:
    /// `ca.pem`, `node-<id>.pem`, `node-<id>-key.pem`.
    pub fn in_dir(dir: impl AsRef<Path>, id: NodeId) -> TlsFiles {
        let dir = dir.as_ref();
        TlsFiles {
            ca: dir.join(CA_CERT_FILE),
            cert: dir.join(node_cert_file(id)),
            key: dir.join(node_key_file(id)),
            id,
        }
    }

    /// Reads and checks the files (see [`TlsIdentity::from_dir`]).
    pub fn load(&self) -> Result<TlsIdentity> {
        self.read()?.identity()
    }

    /// Reads the three files as they are now (nothing checked yet).
    pub(crate) fn read(&self) -> Result<FileSnapshot> {
        if self.id == 0 {
            return Err(TlsError::InvalidNodeId);
        }
        let files = read_files([&self.ca, &self.cert, &self.key])?;
        Ok(FileSnapshot {
            files,
            from: self.clone(),
        })
    }
}

/// The bytes of a node's identity files at one moment.
pub(crate) struct FileSnapshot {
    files: [ReadFile; 3],
    from: TlsFiles,
}

impl FileSnapshot {
    /// Whether the files held the same bytes both times.
    pub(crate) fn same_bytes(&self, other: &FileSnapshot) -> bool {
        self.from == other.from
            && self
                .files
                .iter()
                .zip(&other.files)
                .all(|(a, b)| a.bytes() == b.bytes())
    }

    /// Checks the files as a start does, and that the certificate names the node they
    /// are for ([`TlsError::WrongNode`]).
    pub(crate) fn identity(&self) -> Result<TlsIdentity> {
        let [ca, cert, key] = &self.files;
        let mut identity = TlsIdentity::from_src(ca.src(), cert.src(), key.src())?;
        if identity.id() != self.from.id {
            return Err(TlsError::WrongNode {
                file: self.from.cert.display().to_string(),
                expected: self.from.id,
                found: identity.id(),
            });
        }
        identity.credential_mut().warnings = key_file_warnings(&self.from.key);
        Ok(identity)
    }
}

/// What a reload of the identity files did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsReload {
    /// The files hold the credential in use (or, when polled, did not change since the
    /// last try): nothing was swapped.
    Unchanged,
    /// The files passed every check and are used from now on for new connections (open
    /// ones keep theirs).
    Reloaded {
        /// When the new certificate expires.
        not_after: SystemTime,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::*;
    use std::fs;

    #[test]
    fn snapshots_compare_bytes_and_check_the_node_id() {
        let dir = tempfile::tempdir().unwrap();
        write_cluster_certs(dir.path(), [1, 2]).unwrap();
        let files = TlsFiles::in_dir(dir.path(), 1);
        let a = files.read().unwrap();
        let b = files.read().unwrap();
        assert!(a.same_bytes(&b));
        assert_eq!(a.identity().unwrap().id(), 1);
        // Node 2's files where node 1's belong: refused, naming both ids.
        for (from, to) in [
            (node_cert_file(2), node_cert_file(1)),
            (node_key_file(2), node_key_file(1)),
        ] {
            fs::copy(dir.path().join(from), dir.path().join(to)).unwrap();
        }
        let c = files.read().unwrap();
        assert!(!a.same_bytes(&c));
        let e = c.identity().unwrap_err();
        assert!(
            matches!(
                e,
                TlsError::WrongNode {
                    expected: 1,
                    found: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("names node 2, but node 1"), "{e}");
    }
}
