//! [`TlsState`]: the credential the transport uses now, and reloading it from its files.
//!
//! New connections take the current credential; open ones keep the one they were made
//! with. A reload reads the files, checks them as a start does (and that the certificate
//! names this node), builds both quinn configurations from them, and only then swaps:
//! the server configuration through [`quinn::Endpoint::set_server_config`], the client
//! configuration for the next connect. Any failure keeps what is in use.

use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

use super::cids::{initial_dcids, InitialDcids};
use crate::tls::{FileSnapshot, RemovedIds, TlsError, TlsFiles, TlsIdentity, TlsReload};

/// The transport's credential and where it reloads from.
pub(super) struct TlsState {
    /// The files, when the identity came from files (`None`: never reloads).
    files: Option<TlsFiles>,
    /// The QUIC settings every configuration carries.
    transport: Arc<quinn::TransportConfig>,
    /// The ids the group removed, refused at the handshake by every server
    /// configuration this builds.
    pub(super) removed: RemovedIds,
    /// The first destination ids of the dials, seeded ([`crate::transport::QuicConfig`]'s
    /// `rng_seed`); `None`: quinn draws them from the OS. Kept across reloads, so that a
    /// reload does not start the sequence again.
    dcids: Option<InitialDcids>,
    /// What dials use: the current identity's client configuration.
    client: RwLock<quinn::ClientConfig>,
    /// The current identity; subscribers (the node's metrics, the admin endpoint) see
    /// each swap.
    current: watch::Sender<TlsIdentity>,
    /// Held through a reload and through closing, so that a reload never sets a server
    /// configuration after `close` took it away.
    lock: Mutex<Tried>,
}

/// The files as the last reload found them (polls skip files that did not change), and
/// whether the transport is closed.
#[derive(Default)]
struct Tried {
    last: Option<FileSnapshot>,
    /// What reading the files failed with at the last try (a missing file, say).
    unreadable: Option<String>,
    closed: bool,
}

impl TlsState {
    /// The state of `identity` (loaded from `files`, if given) and the endpoint's first
    /// server configuration.
    pub(super) fn new(
        identity: TlsIdentity,
        files: Option<TlsFiles>,
        transport: Arc<quinn::TransportConfig>,
        rng_seed: Option<u64>,
    ) -> Result<(TlsState, quinn::ServerConfig), TlsError> {
        let removed = RemovedIds::default();
        let server = server_config(&identity, &transport, &removed)?;
        let dcids = rng_seed.map(initial_dcids);
        let client = client_config(&identity, &transport, dcids.as_ref())?;
        let state = TlsState {
            files,
            transport,
            dcids,
            removed,
            client: RwLock::new(client),
            current: watch::Sender::new(identity),
            lock: Mutex::new(Tried::default()),
        };
        Ok((state, server))
    }

    /// The client configuration of the current identity.
    pub(super) fn client_config(&self) -> quinn::ClientConfig {
        self.client
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The identity in use now.
    pub(super) fn current(&self) -> TlsIdentity {
        self.current.borrow().clone()
    }

    /// Sees every identity swapped in (the current one first).
    pub(super) fn subscribe(&self) -> watch::Receiver<TlsIdentity> {
        self.current.subscribe()
    }

    /// Whether there are files to reload from.
    pub(super) fn reloadable(&self) -> bool {
        self.files.is_some()
    }

    /// Reads the files and, if they hold another valid credential of this node, uses it
    /// for new connections. `poll`: files that hold the same bytes as at the last try
    /// are not checked again, and a read that fails as the last one did is not reported
    /// again (so a bad or missing file is reported once, not at every poll).
    pub(super) fn reload(
        &self,
        endpoint: &quinn::Endpoint,
        poll: bool,
    ) -> Result<TlsReload, TlsError> {
        let files = self.files.as_ref().ok_or(TlsError::NotReloadable)?;
        let mut tried = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tried.closed {
            return Ok(TlsReload::Unchanged);
        }
        let snapshot = match files.read() {
            Ok(snapshot) => snapshot,
            Err(e) => {
                let text = e.to_string();
                let again = tried.unreadable.as_ref() == Some(&text);
                tried.unreadable = Some(text);
                if poll && again {
                    return Ok(TlsReload::Unchanged);
                }
                return Err(e);
            }
        };
        tried.unreadable = None;
        if poll
            && tried
                .last
                .as_ref()
                .is_some_and(|last| last.same_bytes(&snapshot))
        {
            return Ok(TlsReload::Unchanged);
        }
        let checked = snapshot.identity();
        tried.last = Some(snapshot);
        let identity = checked?;
        if identity.same_credential(&self.current.borrow()) {
            return Ok(TlsReload::Unchanged);
        }
        let server = server_config(&identity, &self.transport, &self.removed)?;
        let client = client_config(&identity, &self.transport, self.dcids.as_ref())?;
        endpoint.set_server_config(Some(server));
        *self
            .client
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = client;
        let not_after = identity.not_after();
        self.current.send_replace(identity);
        Ok(TlsReload::Reloaded { not_after })
    }

    /// Stops accepting handshakes for good: no reload sets a server configuration again.
    pub(super) fn close(&self, endpoint: &quinn::Endpoint) {
        let mut tried = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tried.closed = true;
        endpoint.set_server_config(None);
    }
}

/// `identity`'s quinn server configuration with the transport's QUIC settings,
/// refusing the `removed` nodes' certificates at the handshake.
fn server_config(
    identity: &TlsIdentity,
    transport: &Arc<quinn::TransportConfig>,
    removed: &RemovedIds,
) -> Result<quinn::ServerConfig, TlsError> {
    let mut config = identity.server_config_refusing(removed)?;
    config.transport_config(transport.clone()).migration(false);
    Ok(config)
}

/// `identity`'s quinn client configuration with the transport's QUIC settings (and
/// the seeded first destination ids, if any).
fn client_config(
    identity: &TlsIdentity,
    transport: &Arc<quinn::TransportConfig>,
    dcids: Option<&InitialDcids>,
) -> Result<quinn::ClientConfig, TlsError> {
    let mut config = identity.client_config()?;
    config.transport_config(transport.clone());
    if let Some(dcids) = dcids {
        config.initial_dst_cid_provider(dcids.clone());
    }
    Ok(config)
}
