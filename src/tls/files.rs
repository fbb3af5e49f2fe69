//! The certificate folders: the names of the files and folders of the two layouts,
//! writing them ([`write_cluster_certs`], [`write_cluster_certs_per_node`],
//! [`write_node_cert`]), and the warnings about key files others may read.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::NodeId;

use super::ca::{ClusterCa, MAX_NODE_VALIDITY_DAYS, NODE_VALIDITY_DAYS};
use super::error::{Result, TlsError};

#[cfg(doc)]
use super::{OperatorIdentity, TlsIdentity};

/// Something worth fixing in the files of an identity that does not stop it from loading
/// ([`TlsIdentity::warnings`], [`OperatorIdentity::warnings`]). The QUIC transport logs
/// each at start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdentityWarning {
    /// A private key file can be read (or written) by its group or by others (mode bits
    /// `0o077`). Anyone who can read it can act as this node (or operator). Fix:
    /// `chmod 600` it, owned by the user the process runs as.
    KeyReadableByOthers {
        /// The key file.
        path: PathBuf,
        /// Its permission bits (e.g. `0o644`).
        mode: u32,
    },
}

impl fmt::Display for IdentityWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityWarning::KeyReadableByOthers { path, mode } => write!(
                f,
                "private key {} has mode {mode:04o}: its group or others can read it; \
                 chmod 600 it",
                path.display()
            ),
        }
    }
}

/// The warnings about the private key file at `path`: permission bits beyond the owner's.
pub(super) fn key_file_warnings(path: &Path) -> Vec<IdentityWarning> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = fs::metadata(path) {
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return vec![IdentityWarning::KeyReadableByOthers {
                    path: path.to_owned(),
                    mode,
                }];
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Vec::new()
}

/// The file holding the CA certificate in the layout of [`write_cluster_certs`].
pub const CA_CERT_FILE: &str = "ca.pem";
/// The file holding the CA private key in the layout of [`write_cluster_certs`].
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// The file holding node `id`'s certificate: `node-<id>.pem`.
pub fn node_cert_file(id: NodeId) -> String {
    format!("node-{id}.pem")
}

/// The file holding node `id`'s private key: `node-<id>-key.pem`.
pub fn node_key_file(id: NodeId) -> String {
    format!("node-{id}-key.pem")
}

/// The file holding the operator certificate in the layout of [`write_cluster_certs`].
pub const OPERATOR_CERT_FILE: &str = "operator.pem";
/// The file holding the operator private key in the layout of [`write_cluster_certs`].
pub const OPERATOR_KEY_FILE: &str = "operator-key.pem";

/// The nodes to write certificates for: sorted, each once, none 0.
fn node_ids(nodes: impl IntoIterator<Item = NodeId>) -> Result<Vec<NodeId>> {
    let mut nodes: Vec<NodeId> = nodes.into_iter().collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.contains(&0) {
        return Err(TlsError::InvalidNodeId);
    }
    Ok(nodes)
}

/// Makes a new CA, one certificate per node and one operator certificate, and writes them
/// into `dir` (created if missing): `ca.pem`, `ca-key.pem`, `node-<id>.pem`,
/// `node-<id>-key.pem`, `operator.pem`, `operator-key.pem`. Key files get mode 0600.
///
/// Refuses ([`TlsError::AlreadyExists`]) if any of these files exists, before writing
/// anything. Give each node `ca.pem` and its own two files; give the operator (the admin
/// tool) `ca.pem` and the two operator files; keep `ca-key.pem` elsewhere.
pub fn write_cluster_certs(
    dir: impl AsRef<Path>,
    nodes: impl IntoIterator<Item = NodeId>,
) -> Result<()> {
    write_cluster_certs_valid_for(dir, nodes, NODE_VALIDITY_DAYS)
}

/// [`write_cluster_certs`] with node certificates valid for `days` (1 to
/// [`MAX_NODE_VALIDITY_DAYS`]).
pub fn write_cluster_certs_valid_for(
    dir: impl AsRef<Path>,
    nodes: impl IntoIterator<Item = NodeId>,
    days: u64,
) -> Result<()> {
    check_days(days)?;
    let dir = dir.as_ref();
    let nodes = node_ids(nodes)?;
    let mut names = vec![
        CA_CERT_FILE.to_owned(),
        CA_KEY_FILE.to_owned(),
        OPERATOR_CERT_FILE.to_owned(),
        OPERATOR_KEY_FILE.to_owned(),
    ];
    for &id in &nodes {
        names.push(node_cert_file(id));
        names.push(node_key_file(id));
    }
    fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.to_owned(),
        source,
    })?;
    for name in &names {
        let path = dir.join(name);
        if path.exists() {
            return Err(TlsError::AlreadyExists { path });
        }
    }
    let ca = ClusterCa::generate()?;
    write_new_file(&dir.join(CA_CERT_FILE), ca.cert_pem(), false)?;
    write_new_file(&dir.join(CA_KEY_FILE), ca.key_pem(), true)?;
    for id in nodes {
        let node = ca.issue_node_for(id, days)?;
        write_new_file(&dir.join(node_cert_file(id)), &node.cert_pem, false)?;
        write_new_file(&dir.join(node_key_file(id)), &node.key_pem, true)?;
    }
    let operator = ca.issue_operator()?;
    write_new_file(&dir.join(OPERATOR_CERT_FILE), &operator.cert_pem, false)?;
    write_new_file(&dir.join(OPERATOR_KEY_FILE), &operator.key_pem, true)?;
    Ok(())
}

/// The folder of the CA's files in the layout of [`write_cluster_certs_per_node`]: `ca`.
pub const CA_DIR: &str = "ca";
/// The folder of the operator's files in the layout of [`write_cluster_certs_per_node`]:
/// `operator`.
pub const OPERATOR_DIR: &str = "operator";

/// The folder of node `id`'s files in the layout of [`write_cluster_certs_per_node`]:
/// `node-<id>`.
pub fn node_dir(id: NodeId) -> String {
    format!("node-{id}")
}

/// Like [`write_cluster_certs`], but one folder per holder, so that no node holds the
/// CA key:
///
/// ```text
/// dir/ca/        ca.pem ca-key.pem              the CA: keep it off the nodes
/// dir/node-<id>/ ca.pem node-<id>.pem node-<id>-key.pem   copy to node <id> only
/// dir/operator/  ca.pem operator.pem operator-key.pem     for the admin tool
/// ```
///
/// Each node folder is what [`TlsIdentity::from_dir`] reads (`--certs dir/node-<id>` in
/// `tenure-worker`), the operator folder what [`OperatorIdentity::from_dir`] reads.
/// Key files get mode 0600, folders 0700. Refuses ([`TlsError::AlreadyExists`]) if any
/// of these files exists, before writing anything. A node that joins later gets its
/// files with [`write_node_cert`] on `dir/ca`, moved to a folder of its own.
pub fn write_cluster_certs_per_node(
    dir: impl AsRef<Path>,
    nodes: impl IntoIterator<Item = NodeId>,
) -> Result<()> {
    write_cluster_certs_per_node_valid_for(dir, nodes, NODE_VALIDITY_DAYS)
}

/// [`write_cluster_certs_per_node`] with node certificates valid for `days` (1 to
/// [`MAX_NODE_VALIDITY_DAYS`]).
pub fn write_cluster_certs_per_node_valid_for(
    dir: impl AsRef<Path>,
    nodes: impl IntoIterator<Item = NodeId>,
    days: u64,
) -> Result<()> {
    check_days(days)?;
    let dir = dir.as_ref();
    let nodes = node_ids(nodes)?;
    let mut files: Vec<PathBuf> = vec![
        dir.join(CA_DIR).join(CA_CERT_FILE),
        dir.join(CA_DIR).join(CA_KEY_FILE),
        dir.join(OPERATOR_DIR).join(CA_CERT_FILE),
        dir.join(OPERATOR_DIR).join(OPERATOR_CERT_FILE),
        dir.join(OPERATOR_DIR).join(OPERATOR_KEY_FILE),
    ];
    for &id in &nodes {
        let d = dir.join(node_dir(id));
        files.extend([
            d.join(CA_CERT_FILE),
            d.join(node_cert_file(id)),
            d.join(node_key_file(id)),
        ]);
    }
    if let Some(path) = files.into_iter().find(|p| p.exists()) {
        return Err(TlsError::AlreadyExists { path });
    }
    let ca = ClusterCa::generate()?;
    let ca_dir = make_private_dir(&dir.join(CA_DIR))?;
    write_new_file(&ca_dir.join(CA_CERT_FILE), ca.cert_pem(), false)?;
    write_new_file(&ca_dir.join(CA_KEY_FILE), ca.key_pem(), true)?;
    for id in nodes {
        let d = make_private_dir(&dir.join(node_dir(id)))?;
        let node = ca.issue_node_for(id, days)?;
        write_new_file(&d.join(CA_CERT_FILE), ca.cert_pem(), false)?;
        write_new_file(&d.join(node_cert_file(id)), &node.cert_pem, false)?;
        write_new_file(&d.join(node_key_file(id)), &node.key_pem, true)?;
    }
    let d = make_private_dir(&dir.join(OPERATOR_DIR))?;
    let operator = ca.issue_operator()?;
    write_new_file(&d.join(CA_CERT_FILE), ca.cert_pem(), false)?;
    write_new_file(&d.join(OPERATOR_CERT_FILE), &operator.cert_pem, false)?;
    write_new_file(&d.join(OPERATOR_KEY_FILE), &operator.key_pem, true)?;
    Ok(())
}

/// Refuses a node validity out of range before anything is written.
fn check_days(days: u64) -> Result<()> {
    if (1..=MAX_NODE_VALIDITY_DAYS).contains(&days) {
        Ok(())
    } else {
        Err(TlsError::InvalidValidity { days })
    }
}

/// Creates `dir` (and its parents) if missing; a folder it creates gets mode 0700.
pub(super) fn make_private_dir(dir: &Path) -> Result<PathBuf> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir).map_err(|source| TlsError::Write {
        path: dir.to_owned(),
        source,
    })?;
    Ok(dir.to_owned())
}

/// Issues a certificate for node `id` from the CA in `dir` (`ca.pem`, `ca-key.pem`, as
/// [`write_cluster_certs`] left them) and writes `node-<id>.pem` and `node-<id>-key.pem`
/// beside it (key mode 0600): for a node that joins a running group. Refuses
/// ([`TlsError::AlreadyExists`]) if either file exists.
pub fn write_node_cert(dir: impl AsRef<Path>, id: NodeId) -> Result<()> {
    let dir = dir.as_ref();
    if id == 0 {
        return Err(TlsError::InvalidNodeId);
    }
    for name in [node_cert_file(id), node_key_file(id)] {
        let path = dir.join(name);
        if path.exists() {
            return Err(TlsError::AlreadyExists { path });
        }
    }
    let ca = ClusterCa::load(dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE))?;
    let node = ca.issue_node(id)?;
    write_new_file(&dir.join(node_cert_file(id)), &node.cert_pem, false)?;
    write_new_file(&dir.join(node_key_file(id)), &node.key_pem, true)
}

/// Creates `path` (failing if it exists) and writes `text`; `secret` files get mode 0600.
pub(super) fn write_new_file(path: &Path, text: &str, secret: bool) -> Result<()> {
    use std::io::Write;
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if secret { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = secret;
    let werr = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    let mut file = opts.open(path).map_err(|source| {
        if source.kind() == io::ErrorKind::AlreadyExists {
            TlsError::AlreadyExists {
                path: path.to_owned(),
            }
        } else {
            werr(source)
        }
    })?;
    file.write_all(text.as_bytes()).map_err(werr)?;
    file.sync_all().map_err(werr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::*;

    #[test]
    fn cluster_certs_directory_layout_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("certs");
        write_cluster_certs(&out, [1, 2, 3]).unwrap();
        for id in 1..=3 {
            assert_eq!(TlsIdentity::from_dir(&out, id).unwrap().id(), id);
        }
        OperatorIdentity::from_dir(&out).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for f in [
                CA_KEY_FILE.to_string(),
                node_key_file(2),
                OPERATOR_KEY_FILE.to_string(),
            ] {
                let mode = fs::metadata(out.join(&f)).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{f}");
            }
        }
        ClusterCa::load(out.join(CA_CERT_FILE), out.join(CA_KEY_FILE)).unwrap();

        let e = write_cluster_certs(&out, [4]).unwrap_err();
        assert!(matches!(e, TlsError::AlreadyExists { .. }), "{e}");
        let e = TlsIdentity::from_dir(&out, 9).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }), "{e}");
        assert!(e.to_string().contains("node-9.pem"), "{e}");

        // A node added later gets its files from the same CA, never over existing ones.
        write_node_cert(&out, 9).unwrap();
        assert_eq!(TlsIdentity::from_dir(&out, 9).unwrap().id(), 9);
        let e = write_node_cert(&out, 9).unwrap_err();
        assert!(matches!(e, TlsError::AlreadyExists { .. }), "{e}");
        assert!(matches!(
            write_node_cert(&out, 0),
            Err(TlsError::InvalidNodeId)
        ));
        // Node 2's files under node 3's names: the certificate says who it is.
        fs::copy(out.join(node_cert_file(2)), out.join(node_cert_file(3))).unwrap();
        fs::copy(out.join(node_key_file(2)), out.join(node_key_file(3))).unwrap();
        let e = TlsIdentity::from_dir(&out, 3).unwrap_err();
        assert!(
            matches!(
                e,
                TlsError::WrongNode {
                    expected: 3,
                    found: 2,
                    ..
                }
            ),
            "{e}"
        );
        let e = write_cluster_certs(dir.path().join("zero"), [0]).unwrap_err();
        assert!(matches!(e, TlsError::InvalidNodeId), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn key_files_readable_by_others_load_with_a_warning_naming_file_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        write_cluster_certs(dir.path(), [1]).unwrap();
        assert!(TlsIdentity::from_dir(dir.path(), 1)
            .unwrap()
            .warnings()
            .is_empty());
        assert!(OperatorIdentity::from_dir(dir.path())
            .unwrap()
            .warnings()
            .is_empty());
        for (name, mode) in [
            (node_key_file(1), 0o644),
            (OPERATOR_KEY_FILE.to_string(), 0o640),
        ] {
            let path = dir.path().join(&name);
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        }
        let id = TlsIdentity::from_dir(dir.path(), 1).unwrap();
        let key = dir.path().join(node_key_file(1));
        assert_eq!(
            id.warnings(),
            &[IdentityWarning::KeyReadableByOthers {
                path: key.clone(),
                mode: 0o644
            }]
        );
        let text = id.warnings()[0].to_string();
        assert!(
            text.contains(&key.display().to_string()) && text.contains("0644"),
            "{text}"
        );
        assert_eq!(id.clone().warnings().len(), 1);
        let op = OperatorIdentity::from_dir(dir.path()).unwrap();
        assert!(matches!(
            op.warnings(),
            [IdentityWarning::KeyReadableByOthers { mode: 0o640, .. }]
        ));
    }

    #[test]
    fn per_node_layout_keeps_the_ca_key_in_its_own_folder() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("certs");
        write_cluster_certs_per_node(&out, [1, 2, 3]).unwrap();
        for id in 1..=3u64 {
            let d = out.join(node_dir(id));
            let mut names: Vec<String> = fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            assert_eq!(
                names,
                [
                    CA_CERT_FILE.to_string(),
                    node_key_file(id),
                    node_cert_file(id)
                ]
            );
            let identity = TlsIdentity::from_dir(&d, id).unwrap();
            assert!(identity.warnings().is_empty(), "{:?}", identity.warnings());
        }
        assert!(!out.join(CA_KEY_FILE).exists());
        OperatorIdentity::from_dir(out.join(OPERATOR_DIR)).unwrap();
        assert!(!out.join(OPERATOR_DIR).join(CA_KEY_FILE).exists());
        // The CA folder issues a joining node that trusts the same CA.
        write_node_cert(out.join(CA_DIR), 4).unwrap();
        TlsIdentity::from_dir(out.join(CA_DIR), 4).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: PathBuf| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(out.join(CA_DIR).join(CA_KEY_FILE)), 0o600);
            assert_eq!(mode(out.join(CA_DIR)), 0o700);
            assert_eq!(mode(out.join(node_dir(2))), 0o700);
        }
        let e = write_cluster_certs_per_node(&out, [5]).unwrap_err();
        assert!(matches!(e, TlsError::AlreadyExists { .. }), "{e}");
    }
}
