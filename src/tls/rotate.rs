//! Rotation on disk: renewing one node's certificate from the CA ([`renew_node_cert`]),
//! making a new CA ([`write_ca`]) and a bundle of several CAs ([`write_ca_bundle`]) for
//! moving a group to a new CA. Files are replaced by renaming a finished file over the
//! old one, so a node that polls its files reads either the old file or the new one,
//! never half of one.

use std::fs;
use std::path::{Path, PathBuf};

use crate::NodeId;

use super::ca::ClusterCa;
use super::credential::Holder;
use super::error::{Result, TlsError};
use super::files::{
    make_private_dir, node_cert_file, node_key_file, write_new_file, CA_CERT_FILE, CA_KEY_FILE,
    OPERATOR_CERT_FILE, OPERATOR_KEY_FILE,
};
use super::identity::{OperatorIdentity, TlsIdentity};
use super::pem::{read_file, Src};

/// Issues node `id` a new certificate and key, valid for `days`, from the CA in `ca_dir`
/// (`ca.pem`, `ca-key.pem`), and puts them in `out_dir` as `node-<id>.pem` and
/// `node-<id>-key.pem` (key mode 0600), replacing the files there. `out_dir` may be
/// `ca_dir` (the one-folder layout). Returns the certificate's and the key's paths.
///
/// If `out_dir` holds a `ca.pem` (the node's CA bundle), the new certificate is first
/// checked against it as the node will check it, and nothing is replaced if it fails
/// (for example [`TlsError::NotTrusted`]: a certificate of a new CA before the node's
/// bundle trusts that CA).
///
/// The key is put in place first, then the certificate: a node that reads its files
/// between the two sees a key that does not match its certificate, refuses that pair,
/// keeps its current credential, and loads the new pair at its next look.
pub fn renew_node_cert(
    ca_dir: impl AsRef<Path>,
    id: NodeId,
    out_dir: impl AsRef<Path>,
    days: u64,
) -> Result<(PathBuf, PathBuf)> {
    let (ca_dir, out_dir) = (ca_dir.as_ref(), out_dir.as_ref());
    if id == 0 {
        return Err(TlsError::InvalidNodeId);
    }
    let ca = ClusterCa::load(ca_dir.join(CA_CERT_FILE), ca_dir.join(CA_KEY_FILE))?;
    let node = ca.issue_node_for(id, days)?;
    let bundle = out_dir.join(CA_CERT_FILE);
    if bundle.exists() {
        let text = read_file(&bundle)?;
        let label = out_dir.join(node_cert_file(id)).display().to_string();
        TlsIdentity::from_src(
            Src::new(bundle.display().to_string(), &text),
            Src::new(format!("{label} (new)"), node.cert_pem.as_bytes()),
            Src::new("its new key", node.key_pem.as_bytes()),
        )?;
    }
    make_private_dir(out_dir)?;
    let cert = out_dir.join(node_cert_file(id));
    let key = out_dir.join(node_key_file(id));
    replace_file(&key, &node.key_pem, true)?;
    replace_file(&cert, &node.cert_pem, false)?;
    Ok((cert, key))
}

/// Issues a new operator certificate and key from the CA in `ca_dir` and puts them in
/// `out_dir` as `operator.pem` and `operator-key.pem` (key mode 0600), replacing the
/// files there; checked first against `out_dir/ca.pem` if there is one, as
/// [`renew_node_cert`] does. For the move to a new CA: nodes that trust only the new CA
/// refuse the old operator certificate.
pub fn renew_operator_cert(
    ca_dir: impl AsRef<Path>,
    out_dir: impl AsRef<Path>,
) -> Result<(PathBuf, PathBuf)> {
    let (ca_dir, out_dir) = (ca_dir.as_ref(), out_dir.as_ref());
    let ca = ClusterCa::load(ca_dir.join(CA_CERT_FILE), ca_dir.join(CA_KEY_FILE))?;
    let operator = ca.issue_operator()?;
    let bundle = out_dir.join(CA_CERT_FILE);
    if bundle.exists() {
        let text = read_file(&bundle)?;
        let label = out_dir.join(OPERATOR_CERT_FILE).display().to_string();
        OperatorIdentity::from_src(
            Src::new(bundle.display().to_string(), &text),
            Src::new(format!("{label} (new)"), operator.cert_pem.as_bytes()),
            Src::new("its new key", operator.key_pem.as_bytes()),
        )?;
    }
    make_private_dir(out_dir)?;
    let cert = out_dir.join(OPERATOR_CERT_FILE);
    let key = out_dir.join(OPERATOR_KEY_FILE);
    replace_file(&key, &operator.key_pem, true)?;
    replace_file(&cert, &operator.cert_pem, false)?;
    Ok((cert, key))
}

/// Makes a new CA and writes `ca.pem` and `ca-key.pem` (mode 0600) into `dir` (created
/// with mode 0700 if missing). Refuses ([`TlsError::AlreadyExists`]) if either exists.
pub fn write_ca(dir: impl AsRef<Path>) -> Result<ClusterCa> {
    let dir = dir.as_ref();
    for name in [CA_CERT_FILE, CA_KEY_FILE] {
        let path = dir.join(name);
        if path.exists() {
            return Err(TlsError::AlreadyExists { path });
        }
    }
    let ca = ClusterCa::generate()?;
    make_private_dir(dir)?;
    write_new_file(&dir.join(CA_CERT_FILE), ca.cert_pem(), false)?;
    write_new_file(&dir.join(CA_KEY_FILE), ca.key_pem(), true)?;
    Ok(ca)
}

/// Writes the CA certificates of the files `cas` (each a `ca.pem`, or a bundle) into one
/// bundle at `out`, replacing it: a node trusts every CA in its `ca.pem`. Each input
/// must hold CA certificates only ([`TlsError::NotCa`]); a certificate that appears in
/// several inputs is written once. Returns how many CAs the bundle holds.
pub fn write_ca_bundle(cas: &[impl AsRef<Path>], out: impl AsRef<Path>) -> Result<usize> {
    let out = out.as_ref();
    let mut text = String::new();
    let mut seen = Vec::new();
    for path in cas {
        let path = path.as_ref();
        let bytes = read_file(path)?;
        let src = Src::new(path.display().to_string(), &bytes);
        for der in super::credential::ca_certs_of(&src)? {
            if seen.contains(&der) {
                continue;
            }
            text.push_str(&pem_of(&der));
            seen.push(der);
        }
    }
    if seen.is_empty() {
        return Err(TlsError::NoCertificate {
            file: "the CA bundle's inputs (none given)".into(),
        });
    }
    replace_file(out, &text, false)?;
    Ok(seen.len())
}

/// A certificate as a PEM block.
fn pem_of(der: &[u8]) -> String {
    let b64 = base64(der);
    let mut s = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        s.push_str(&String::from_utf8_lossy(line));
        s.push('\n');
    }
    s.push_str("-----END CERTIFICATE-----\n");
    s
}

/// Standard base64 with padding (RFC 4648), as PEM bodies are.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Writes `text` to a new file beside `path`, syncs it and renames it over `path`: a
/// reader sees the old contents or the new ones. `secret` files get mode 0600.
fn replace_file(path: &Path, text: &str, secret: bool) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let werr = |p: &Path| {
        let p = p.to_owned();
        move |source| TlsError::Write { path: p, source }
    };
    let _ = fs::remove_file(&tmp);
    write_new_file(&tmp, text, secret)?;
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        werr(path)(e)
    })?;
    if let Some(dir) = path.parent() {
        // Make the rename durable; a folder that cannot be opened is no reason to fail.
        if let Ok(d) = fs::File::open(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        }) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (raw, b64) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), b64);
        }
    }

    #[test]
    fn renewing_replaces_one_nodes_files_with_a_certificate_of_the_chosen_life() {
        let dir = tempfile::tempdir().unwrap();
        write_cluster_certs_per_node(dir.path(), [1, 2]).unwrap();
        let node = dir.path().join(node_dir(2));
        let before = TlsIdentity::from_dir(&node, 2).unwrap();
        renew_node_cert(dir.path().join(CA_DIR), 2, &node, 30).unwrap();
        let after = TlsIdentity::from_dir(&node, 2).unwrap();
        assert!(!after.same_credential(&before));
        assert!(after.warnings().is_empty(), "{:?}", after.warnings());
        let left = after
            .not_after()
            .duration_since(std::time::SystemTime::now())
            .unwrap();
        assert!(
            left.as_secs() / 86_400 == 29 || left.as_secs() / 86_400 == 30,
            "{left:?}"
        );
        let e = renew_node_cert(dir.path().join(CA_DIR), 2, &node, 0).unwrap_err();
        assert!(matches!(e, TlsError::InvalidValidity { days: 0 }), "{e}");
        let e = renew_node_cert(&node, 2, &node, 30).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }), "no CA key there: {e}");
        // A certificate of a CA the node's bundle does not trust replaces nothing.
        let other = dir.path().join("other");
        write_ca(&other).unwrap();
        let e = renew_node_cert(&other, 2, &node, 30).unwrap_err();
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        assert!(TlsIdentity::from_dir(&node, 2)
            .unwrap()
            .same_credential(&after));
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(&node)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
    }

    #[test]
    fn a_bundle_of_two_cas_trusts_certificates_of_either() {
        let dir = tempfile::tempdir().unwrap();
        let old = write_ca(dir.path().join("old")).unwrap();
        let new = write_ca(dir.path().join("new")).unwrap();
        let e = write_ca(dir.path().join("new")).unwrap_err();
        assert!(matches!(e, TlsError::AlreadyExists { .. }), "{e}");
        let bundle = dir.path().join("bundle.pem");
        let cas = [
            dir.path().join("old").join(CA_CERT_FILE),
            dir.path().join("new").join(CA_CERT_FILE),
            dir.path().join("old").join(CA_CERT_FILE),
        ];
        assert_eq!(write_ca_bundle(&cas, &bundle).unwrap(), 2);
        let text = fs::read_to_string(&bundle).unwrap();
        for ca in [&old, &new] {
            let n = ca.issue_node(1).unwrap();
            let id = TlsIdentity::from_pem(&text, &n.cert_pem, &n.key_pem).unwrap();
            assert_eq!(id.ca_certs().len(), 2);
        }
        // The operator's files, renewed from the new CA, load under the bundle.
        let op = dir.path().join("operator");
        fs::create_dir(&op).unwrap();
        fs::copy(&bundle, op.join(CA_CERT_FILE)).unwrap();
        renew_operator_cert(dir.path().join("new"), &op).unwrap();
        let id = OperatorIdentity::from_dir(&op).unwrap();
        assert!(id.warnings().is_empty(), "{:?}", id.warnings());
        // A node certificate is no CA.
        let n = old.issue_node(1).unwrap();
        let leaf = dir.path().join("leaf.pem");
        fs::write(&leaf, &n.cert_pem).unwrap();
        let e = write_ca_bundle(&[&leaf], dir.path().join("b2.pem")).unwrap_err();
        assert!(matches!(e, TlsError::NotCa { .. }), "{e}");
    }
}
